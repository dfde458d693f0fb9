"""A local Anthropic-compatible model server for tests and benchmarks (never for production).

It answers ``POST /v1/messages`` (JSON or SSE in Anthropic's exact event format) and
``/v1/messages/count_tokens`` from a queue of scripted replies -- text, ``tool_use`` blocks,
injected errors such as 429 with ``retry-after`` or 529 overloaded -- and records every request it
receives (path, headers including the key it saw, body) for assertions. The real ``anthropic`` SDK
works against it, streaming and not. Control it through ``/_control/*`` or ``ScriptedUpstream``.

Reply specs are plain dicts (build them with ``text_reply``, ``tool_reply``, ``error_reply``):

- ``{"kind": "message", "content": [blocks], "stop_reason": ..., "usage": {...}, "model": ...,
  "delay": s, "chunk_delay": s}``; blocks are ``{"type": "text", "text": ...}`` or
  ``{"type": "tool_use", "name": ..., "input": {...}}``. In text, ``{api_key}`` becomes the
  x-api-key the server saw and ``{headers}`` the JSON of all request headers (leak attacks).
- ``{"kind": "error", "status": 429, "message": ..., "error_type": ..., "retry_after": s}``.

Run standalone: ``python tests/kstest/upstream.py --port 8999`` (``KSTEST_UPSTREAM_API_KEY`` = key to demand).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
DEFAULT_MODEL = "claude-test-1"
KEY_ENV = "KSTEST_UPSTREAM_API_KEY"  # when set, requests without this key get 401


def text_reply(text: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "message", "content": [{"type": "text", "text": text}], **extra}


def tool_reply(
    name: str, tool_input: dict[str, Any], text: str | None = None, **extra: Any
) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks.append({"type": "tool_use", "name": name, "input": tool_input})
    return {"kind": "message", "content": blocks, "stop_reason": "tool_use", **extra}


def error_reply(status: int, message: str | None = None, retry_after: float | None = None) -> dict[str, Any]:
    return {"kind": "error", "status": status, "message": message, "retry_after": retry_after}


def estimate_tokens(value: Any) -> int:
    """A deterministic stand-in for a tokenizer: about four characters per token."""
    return max(1, len(json.dumps(value, separators=(",", ":"))) // 4)


@dataclass
class UpstreamState:
    """Only ever touched from the server's event loop, so it needs no lock."""

    api_key: str | None = None  # when set, requests without it get 401 like the real API
    queue: deque[dict[str, Any]] = field(default_factory=deque)
    default: dict[str, Any] = field(default_factory=lambda: text_reply("Hello from the test upstream."))
    requests: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    gate: asyncio.Event | None = None  # while set up (``hold``), requests wait here until ``release``


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _pieces(text: str, n: int = 4) -> list[str]:
    if not text:
        return [""]
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)]


def key_seen(headers: dict[str, str]) -> str | None:
    """The key a request carried: ``x-api-key`` or ``Authorization: Bearer`` (the SDK's choice)."""
    scheme, _, value = headers.get("authorization", "").partition(" ")
    return headers.get("x-api-key") or (value.strip() if scheme.lower() == "bearer" else None)


def _fill(text: str, headers: dict[str, str]) -> str:
    return text.replace("{api_key}", key_seen(headers) or "").replace("{headers}", json.dumps(headers))


def build_message(state: UpstreamState, reply: dict[str, Any], body: dict, headers: dict) -> dict[str, Any]:
    n = next(state.ids)
    content = []
    for i, block in enumerate(reply.get("content") or []):
        if block["type"] == "text":
            content.append({"type": "text", "text": _fill(block["text"], headers)})
        else:
            tool_id = block.get("id") or f"toolu_test_{n:06d}_{i}"
            content.append(
                {"type": "tool_use", "id": tool_id, "name": block["name"], "input": block["input"]}
            )
    text_len = sum(len(json.dumps(b)) for b in content)
    limit = body.get("max_tokens")
    usage = {
        "input_tokens": estimate_tokens(body.get("messages", [])),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        # Like the real API, never more output than max_tokens (a scripted usage may say otherwise).
        "output_tokens": min(max(1, text_len // 4), limit if isinstance(limit, int) and limit > 0 else 2**31),
        **(reply.get("usage") or {}),
    }
    return {
        "id": f"msg_test_{n:06d}",
        "type": "message",
        "role": "assistant",
        "model": reply.get("model") or body.get("model") or DEFAULT_MODEL,
        "content": content,
        "stop_reason": reply.get("stop_reason", "end_turn"),
        "stop_sequence": None,
        "usage": usage,
    }


async def stream_events(message: dict[str, Any], chunk_delay: float) -> AsyncIterator[bytes]:
    """The message as Anthropic's SSE events, one event per chunk."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    yield _sse("message_start", {"type": "message_start", "message": start})
    yield _sse("ping", {"type": "ping"})
    for index, block in enumerate(message["content"]):
        if chunk_delay:
            await asyncio.sleep(chunk_delay)
        if block["type"] == "text":
            first, deltas = {"type": "text", "text": ""}, _pieces(block["text"])
            kinds = ("text_delta", "text")
        else:
            first = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas, kinds = _pieces(json.dumps(block["input"]), 2), ("input_json_delta", "partial_json")
        yield _sse(
            "content_block_start", {"type": "content_block_start", "index": index, "content_block": first}
        )
        for piece in deltas:
            if chunk_delay:
                await asyncio.sleep(chunk_delay)
            delta = {"type": kinds[0], kinds[1]: piece}
            yield _sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    yield _sse(
        "message_delta",
        {"type": "message_delta", "delta": delta, "usage": {"output_tokens": usage["output_tokens"]}},
    )
    yield _sse("message_stop", {"type": "message_stop"})


def build_upstream_app(state: UpstreamState) -> FastAPI:
    app = FastAPI(title="kswarm test upstream")

    def error(
        status: int, message: str, error_type: str | None = None, headers: dict | None = None
    ) -> Response:
        body = {
            "type": "error",
            "error": {"type": error_type or ERROR_TYPES.get(status, "api_error"), "message": message},
        }
        return JSONResponse(status_code=status, content=body, headers=headers)

    async def record(request: Request) -> tuple[dict[str, Any], dict[str, str], Response | None]:
        raw = await request.body()
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = None
        state.requests.append(
            {
                "key": key_seen(headers),
                "path": request.url.path,
                "query": request.url.query,
                "headers": headers,
                "body": body,
                "ts": time.time(),
            }
        )
        if state.api_key is not None and key_seen(headers) != state.api_key:
            return {}, headers, error(401, "invalid x-api-key")
        if not isinstance(body, dict):
            return {}, headers, error(400, "request body is not a JSON object")
        return body, headers, None

    @app.post("/v1/messages")
    async def messages(request: Request) -> Response:
        body, headers, refused = await record(request)
        if refused is not None:
            return refused
        reply = state.queue.popleft() if state.queue else state.default
        state.in_flight += 1
        state.max_in_flight = max(state.max_in_flight, state.in_flight)
        streaming = False
        try:
            if state.gate is not None:
                await state.gate.wait()
            if reply.get("delay"):
                await asyncio.sleep(reply["delay"])
            if reply.get("kind") == "error":
                status = int(reply["status"])
                retry = reply.get("retry_after")
                extra = {"retry-after": str(retry)} if retry is not None else None
                message = _fill(reply.get("message") or f"scripted error {status}", headers)
                return error(status, message, reply.get("error_type"), extra)
            message = build_message(state, reply, body, headers)
            headers_out = {"request-id": f"req_{message['id']}"}
            if not body.get("stream"):
                return JSONResponse(message, headers=headers_out)

            async def events() -> AsyncIterator[bytes]:
                try:
                    async for chunk in stream_events(message, float(reply.get("chunk_delay") or 0)):
                        yield chunk
                finally:
                    state.in_flight -= 1

            streaming = True
            return StreamingResponse(events(), media_type="text/event-stream", headers=headers_out)
        finally:
            if not streaming:
                state.in_flight -= 1

    @app.post("/v1/messages/count_tokens")
    async def count_tokens(request: Request) -> Response:
        body, _, refused = await record(request)
        if refused is not None:
            return refused
        state.in_flight += 1
        state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            if state.gate is not None:
                await state.gate.wait()
        finally:
            state.in_flight -= 1
        counted = [body.get("system"), body.get("messages", []), body.get("tools")]
        return JSONResponse({"input_tokens": estimate_tokens(counted)})

    @app.post("/_control/hold")
    async def hold() -> dict[str, Any]:
        state.gate = state.gate or asyncio.Event()
        return {"ok": True}

    @app.post("/_control/release")
    async def release() -> dict[str, Any]:
        gate, state.gate = state.gate, None
        if gate is not None:
            gate.set()
        return {"ok": True}

    @app.post("/_control/replies")
    async def script(request: Request) -> dict[str, Any]:
        spec = await request.json()
        state.queue.extend(spec.get("replies", []))
        if spec.get("default") is not None:
            state.default = spec["default"]
        return {"queued": len(state.queue)}

    @app.post("/_control/reset")
    async def reset() -> dict[str, Any]:
        state.queue.clear()
        state.requests.clear()
        state.default = text_reply("Hello from the test upstream.")
        state.max_in_flight = state.in_flight
        return {"ok": True}

    @app.get("/_control/requests")
    async def requests() -> list[dict[str, Any]]:
        return state.requests

    @app.get("/_control/stats")
    async def stats() -> dict[str, Any]:
        return {
            "requests": len(state.requests),
            "queued": len(state.queue),
            "in_flight": state.in_flight,
            "max_in_flight": state.max_in_flight,
        }

    return app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ScriptedUpstream:
    """Start/stop the test upstream (a thread here, or a child process) and script it over HTTP."""

    def __init__(self, port: int | None = None, api_key: str | None = None, process: bool = False) -> None:
        self.port = port or free_port()
        self.api_key = api_key
        self.process = process
        self.server: uvicorn.Server | None = None
        self.thread: threading.Thread | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.http = httpx.Client(base_url=self.url, timeout=10, trust_env=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 15) -> ScriptedUpstream:
        if self.process:
            cmd = [sys.executable, str(Path(__file__).resolve()), "--port", str(self.port)]
            env = {**os.environ, KEY_ENV: self.api_key or ""}
            self.proc = subprocess.Popen(cmd, env=env)
        else:
            app = build_upstream_app(UpstreamState(api_key=self.api_key))
            config = uvicorn.Config(
                app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off"
            )
            self.server = uvicorn.Server(config)
            self.thread = threading.Thread(target=self.server.run, name="test-upstream", daemon=True)
            self.thread.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.http.get("/_control/stats").raise_for_status()
                return self
            except httpx.TransportError:
                time.sleep(0.02)
        raise RuntimeError("the test upstream did not come up")

    def stop(self) -> None:
        if self.server is not None and self.thread is not None:
            self.server.should_exit = True
            self.thread.join(10)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.server = self.thread = self.proc = None

    def close(self) -> None:
        self.stop()
        self.http.close()

    def __enter__(self) -> ScriptedUpstream:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    def script(self, *replies: dict[str, Any], default: dict[str, Any] | None = None) -> None:
        """Queue replies (served in order, then ``default``)."""
        self.http.post(
            "/_control/replies", json={"replies": list(replies), "default": default}
        ).raise_for_status()

    def reset(self) -> None:
        self.http.post("/_control/reset").raise_for_status()

    def hold(self) -> None:
        """Hold every request that arrives (counted in flight) until ``release``: tests see requests
        overlap by this event, not by a delay."""
        self.http.post("/_control/hold").raise_for_status()

    def release(self) -> None:
        self.http.post("/_control/release").raise_for_status()

    def requests(self, path: str | None = "/v1/messages") -> list[dict[str, Any]]:
        found = self.http.get("/_control/requests").json()
        return [r for r in found if path is None or r["path"] == path]

    def stats(self) -> dict[str, Any]:
        return self.http.get("/_control/stats").json()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8999)
    args = parser.parse_args()
    app = build_upstream_app(UpstreamState(api_key=os.environ.get(KEY_ENV) or None))
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", lifespan="off")


if __name__ == "__main__":
    main()
