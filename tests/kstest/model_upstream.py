"""A local Anthropic-compatible upstream that plays the model of a kernel swarm (tests only).

Where ``kstest.upstream`` serves a queue of scripted replies, this server *decides*: each
``POST /v1/messages`` is answered with the next ``tool_use`` the agent's role would choose, from what
the request shows (``kstest.model_policy``: identity from the system prompt, the wake's events, the
tool calls and results since). It refuses a request without the real key (401) like the real API, so a
proxy that forgot to inject it fails the run; streaming uses Anthropic's SSE events
(``kstest.upstream``'s builders). ``ModelUpstream.decisions`` records every choice per agent and
``log`` every request with its reply (JSON Lines).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from kstest.model_policy import as_tool_use, next_call, read_wake
from kstest.upstream import UpstreamState, build_message, free_port, key_seen, stream_events, text_reply

__all__ = ["ModelUpstream"]

# -- the server ---------------------------------------------------------------------------------------


class ModelUpstream:
    """The deciding upstream in a thread; ``decisions[agent]`` lists (tool name, input) it chose."""

    def __init__(self, api_key: str | None = None, log: Path | None = None) -> None:
        self.log = log  # every request and the reply chosen, as JSON Lines (for a failing run's reader)
        self.port = free_port()
        self.state = UpstreamState(api_key=api_key)
        self.decisions: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        self.lock = threading.Lock()
        self.server: uvicorn.Server | None = None
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reply_for(self, body: dict[str, Any]) -> dict[str, Any]:
        wake = read_wake(body)
        if wake is None:
            return text_reply("OK.")
        call = next_call(wake)
        with self.lock:
            self.decisions.setdefault(wake.me, []).append(
                (call.name, call.input) if call else ("end_turn", {})
            )
        if call is None:
            return text_reply(f"Done with this wake ({len(wake.done)} tool call(s)).")
        return {"kind": "message", "content": [as_tool_use(wake, call)], "stop_reason": "tool_use"}

    def app(self) -> FastAPI:
        app = FastAPI(title="kswarm model upstream")
        state = self.state

        @app.post("/v1/messages")
        async def messages(request: Request) -> Response:
            headers = {k.lower(): v for k, v in request.headers.items()}
            body = json.loads(await request.body() or b"{}")
            state.requests.append(
                {"key": key_seen(headers), "headers": headers, "body": body, "ts": time.time()}
            )
            if state.api_key is not None and key_seen(headers) != state.api_key:
                error = {"type": "authentication_error", "message": "invalid x-api-key"}
                return JSONResponse({"type": "error", "error": error}, status_code=401)
            reply = self.reply_for(body)
            if self.log is not None:
                with self.log.open("a") as out:
                    out.write(json.dumps({"body": body, "reply": reply}) + "\n")
            message = build_message(state, reply, body, headers)
            if not body.get("stream"):
                return JSONResponse(message)
            return StreamingResponse(stream_events(message, 0.0), media_type="text/event-stream")

        @app.post("/v1/messages/count_tokens")
        async def count_tokens(request: Request) -> Response:
            return JSONResponse({"input_tokens": max(1, len(await request.body()) // 4)})

        return app

    def start(self, timeout: float = 15) -> ModelUpstream:
        config = uvicorn.Config(
            self.app(), host="127.0.0.1", port=self.port, log_level="warning", lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="model-upstream", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                httpx.post(f"{self.url}/v1/messages/count_tokens", json={}, timeout=1, trust_env=False)
                return self
            except httpx.TransportError:
                time.sleep(0.02)
        raise RuntimeError("the model upstream did not come up")

    def stop(self) -> None:
        if self.server is not None and self.thread is not None:
            self.server.should_exit = True
            self.thread.join(10)
        self.server = self.thread = None

    def __enter__(self) -> ModelUpstream:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
