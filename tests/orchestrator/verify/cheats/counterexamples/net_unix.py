"""Talks to a unix socket like the gateway's, then claims a real counterexample."""

import socket


def generate(domain: dict, seed: int) -> list[dict]:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect("__SOCKET__")
    conn.sendall(b"POST /api/counterexamples HTTP/1.1\r\n\r\n")
    return [{"case": {"n": 500}, "dtype": "float32"}]
