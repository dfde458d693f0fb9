"""A loopback HTTP bridge to the gateway's unix socket, for clients that only speak TCP.

The Claude Code CLI takes a base URL, not a socket, and agent containers have no network but their
own loopback. The bridge listens on ``127.0.0.1:<free port>`` inside the agent, forwards every request
to the gateway's socket with ``Host: kswarm`` (the name the gateway's MCP transport security admits
for socket clients) and streams the answer back chunk by chunk (SSE passes through unbuffered).
It adds nothing and keeps nothing: the caller's own ``Authorization`` / ``x-api-key`` goes through.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "host",
}


class _Server(uvicorn.Server):
    """Takes no signals: the agent's own handlers (``agents.loop``) stay in place while it serves."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class SocketBridge:
    """``async with SocketBridge(path) as bridge: bridge.url`` -- a TCP front for the unix socket."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.client: httpx.AsyncClient | None = None
        self.server: uvicorn.Server | None = None
        self.task: asyncio.Task[None] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> SocketBridge:
        transport = httpx.AsyncHTTPTransport(uds=str(self.socket_path))
        timeout = httpx.Timeout(None, connect=10.0)  # model answers and inbox waits take their time
        self.client = httpx.AsyncClient(base_url="http://kswarm", transport=transport, timeout=timeout)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app, interface="asgi3", log_level="warning", lifespan="off", access_log=False
        )
        self.server = _Server(config)
        self.task = asyncio.create_task(self.server.serve(sockets=[sock]), name="socket-bridge")
        while not self.server.started:
            if self.task.done():
                self.task.result()
            await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.server is not None:
            self.server.should_exit = True
        if self.task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self.task, 5)
        if self.client is not None:
            await self.client.aclose()

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        assert self.client is not None
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in scope["headers"]
            if k.decode("latin-1").lower() not in HOP_BY_HOP
        ]
        path = scope.get("raw_path") or scope["path"].encode()
        target = path.decode("latin-1") + (
            f"?{scope['query_string'].decode()}" if scope["query_string"] else ""
        )
        request = self.client.build_request(scope["method"], target, headers=headers, content=body)
        try:
            upstream = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            await self._fail(send, f"gateway unreachable through {self.socket_path}: {type(exc).__name__}")
            return
        try:
            out = [
                (k.encode("latin-1"), v.encode("latin-1"))
                for k, v in upstream.headers.multi_items()
                if k.lower() not in HOP_BY_HOP
            ]
            await send({"type": "http.response.start", "status": upstream.status_code, "headers": out})
            async for chunk in self._chunks(upstream):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await upstream.aclose()

    @staticmethod
    async def _chunks(upstream: httpx.Response) -> AsyncIterator[bytes]:
        with contextlib.suppress(httpx.HTTPError):
            async for chunk in upstream.aiter_raw():
                yield chunk

    @staticmethod
    async def _fail(send: Any, message: str) -> None:
        body = json.dumps({"detail": message}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 502, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})
