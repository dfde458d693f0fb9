"""Run the gateway on 127.0.0.1 TCP and on a unix socket at the same time (one uvicorn server)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from gateway.config import GatewaySettings


def bind_tcp(host: str, port: int) -> socket.socket:
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted sockets only when the listening
    # socket says TCP; without it, Nagle + delayed ACKs add ~40 ms to every small request.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def bind_unix(path: Path) -> socket.socket:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_socket():
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    # Agents run as other uids (one per agent); the token, not the file mode, is the gate.
    os.chmod(path, 0o666)
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    """uvicorn re-raises SIGINT/SIGTERM after shutting down, which would kill the process before
    its callers stop what they started (embedded Redis, agents); we take the signals ourselves."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        handled = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self._exit_on_signal)
                handled.append(sig)
            except (RuntimeError, ValueError):  # not the main thread: the caller handles signals
                pass
        try:
            yield
        finally:
            for sig in handled:
                loop.remove_signal_handler(sig)

    def _exit_on_signal(self) -> None:
        self.force_exit = self.should_exit  # a second Ctrl-C stops waiting for connections
        self.should_exit = True


def freeze_startup_heap() -> None:
    """Move everything alive after start-up (modules, routes, models, plugins: most of the heap) out of
    the cyclic GC's reach. A full collection otherwise walks it all: 70–160 ms pauses in a loaded
    gateway, which were the p99 of post→inbox (docs/performance.md, "Scale"). Only for a process that
    is the gateway: objects frozen never have their cycles collected."""
    gc.collect()
    gc.freeze()


async def serve(
    app: FastAPI,
    settings: GatewaySettings,
    ready: asyncio.Event | None = None,
    stop: asyncio.Event | None = None,
    freeze_heap: bool = False,
) -> None:
    """Serve until signalled (SIGINT/SIGTERM) or ``stop`` is set; removes the unix socket afterwards.

    ``freeze_heap``: once started, keep the start-up heap out of GC passes (``freeze_startup_heap``)."""
    tcp = bind_tcp(settings.host, settings.port)
    unix_path = settings.socket_path()
    unix = bind_unix(unix_path)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=3)
    server = _Server(config)
    try:
        task = asyncio.create_task(server.serve(sockets=[tcp, unix]))
        # uvicorn exposes no start-up event; poll its flag briefly.
        while not server.started and not task.done():  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        if freeze_heap and server.started:
            freeze_startup_heap()
        if ready is not None:
            ready.set()
        if stop is not None:
            stopper = asyncio.create_task(stop.wait())
            await asyncio.wait([task, stopper], return_when=asyncio.FIRST_COMPLETED)
            server.should_exit = True
            stopper.cancel()
        await task
    finally:
        tcp.close()
        unix.close()
        unix_path.unlink(missing_ok=True)
