"""The demo's model, served as an Anthropic-compatible upstream behind the gateway's LLM proxy.

``kswarm demo`` (the scripted model) once ran its rules inside each agent process: no model call
reached the gateway's LLM proxy, nothing was booked, and "what did dev-7 cost" read $0 -- the one
question a team running a paid swarm asks most was unanswerable in the demo. Now the same rules
(``orchestrator.demo.policy`` in ``agents.models.scripted.ScriptedModel``) answer ``POST /v1/messages``
on a loopback port of the demo's own process, and the agents reach them like any real model: the
Anthropic client, through the proxy, which injects the key, books every token to the agent (and to the
task it holds) and prices it by its table. So usage, budgets, the Attention budget items, the agent
page's cost and the dataset's ``cost_usd`` are all real numbers of a real path in the demo.

What is simulated is only the model: its tokens are estimated (four characters a token, as the scripted
model counts) and priced at the proxy's ``default`` price, as an unknown model id is
(docs/llm-proxy.md). The role of the caller is read from its system prompt ("You are dev-1, a developer
agent ..."), as a model would read it; the request must carry the per-run key the launcher gave the
proxy (a 401 in Anthropic's shape otherwise), so a call that did not come through the proxy is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import re
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from agents.models import ModelReply
from agents.models.conversation import estimate_tokens
from agents.models.scripted import ScriptedModel
from orchestrator.demo.policy import demo_rules
from orchestrator.demo.steps import DemoPolicy

ROLE_RE = re.compile(r"You are (\S+), an? ([\w-]+) agent")
ROLES = ("lead", "developer", "reviewer", "red-team")


def role_of(system: str) -> str:
    """The role the system prompt gives the caller; one the demo has no rules for answers as a developer
    would not: with the scripted defaults (it notes DMs and answers mentions)."""
    found = ROLE_RE.search(system)
    return found.group(2) if found else ""


def system_text(system: Any) -> str:
    """Anthropic's ``system``: a string, or a list of text blocks."""
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "\n".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    return ""


def anthropic_error(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse({"type": "error", "error": {"type": kind, "message": message}}, status_code=status)


def as_message(reply: ModelReply, model: str) -> dict[str, Any]:
    return {
        "id": f"msg_demo_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": reply.content,
        "stop_reason": reply.stop_reason,
        "stop_sequence": None,
        "usage": reply.usage.as_dict(),
    }


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def stream_events(message: dict[str, Any]) -> Iterator[bytes]:
    """The message as Anthropic streams it: start, each block (start, one delta, stop), delta, stop."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 0}}
    yield sse("message_start", {"type": "message_start", "message": start})
    for index, block in enumerate(message["content"]):
        if block.get("type") == "tool_use":
            opening = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block.get("input") or {})}
        else:
            opening = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": str(block.get("text", ""))}
        yield sse(
            "content_block_start", {"type": "content_block_start", "index": index, "content_block": opening}
        )
        yield sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        yield sse("content_block_stop", {"type": "content_block_stop", "index": index})
    stopped = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    yield sse(
        "message_delta",
        {"type": "message_delta", "delta": stopped, "usage": {"output_tokens": usage["output_tokens"]}},
    )
    yield sse("message_stop", {"type": "message_stop"})


class DemoUpstream:
    """The demo's rules behind ``/v1/messages``; ``key`` is what the proxy must send (``x-api-key``)."""

    def __init__(self, policy: DemoPolicy, key: str) -> None:
        self.key = key
        self.models = {role: ScriptedModel(demo_rules(policy, role)) for role in ROLES}
        self.fallback = ScriptedModel()

    def authorised(self, request: Request) -> bool:
        """The key as Anthropic's API takes it: ``x-api-key`` (the proxy's default ``key_header``) or
        ``Authorization: Bearer`` (its ``bearer`` setting, and what the anthropic SDK sends)."""
        given = request.headers.get("x-api-key")
        if given is None:
            scheme, _, given = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer":
                return False
        return hmac.compare_digest(given.encode(), self.key.encode())

    async def answer(self, body: dict[str, Any]) -> ModelReply:
        system = system_text(body.get("system"))
        model = self.models.get(role_of(system), self.fallback)
        raw_messages, raw_tools = body.get("messages"), body.get("tools")
        messages: list[dict[str, Any]] = raw_messages if isinstance(raw_messages, list) else []
        tools: list[dict[str, Any]] = raw_tools if isinstance(raw_tools, list) else []
        return await model.complete(system, messages, tools, int(body.get("max_tokens") or 1024))

    async def request_body(self, request: Request) -> dict[str, Any] | Response:
        """The request's JSON object, or the Anthropic-shaped refusal to send instead."""
        if not self.authorised(request):
            return anthropic_error(401, "authentication_error", "invalid x-api-key")
        try:
            body = json.loads(await request.body() or b"{}")
        except ValueError:
            return anthropic_error(400, "invalid_request_error", "the body is not JSON")
        if not isinstance(body, dict):
            return anthropic_error(400, "invalid_request_error", "the body is not a JSON object")
        return body

    def app(self) -> FastAPI:
        app = FastAPI(title="kswarm demo model", openapi_url=None, docs_url=None, redoc_url=None)
        # A malformed field is a 4xx, not a 500: the proxy would retry a 500 as the upstream's failure.
        malformed = (TypeError, ValueError, KeyError, AttributeError)

        @app.post("/v1/messages")
        async def messages(request: Request) -> Response:
            body = await self.request_body(request)
            if isinstance(body, Response):
                return body
            try:
                reply = await self.answer(body)
            except malformed as exc:
                return anthropic_error(400, "invalid_request_error", f"malformed request: {exc}")
            message = as_message(reply, str(body.get("model") or "scripted"))
            if not body.get("stream"):
                return JSONResponse(message)
            return StreamingResponse(iter(list(stream_events(message))), media_type="text/event-stream")

        @app.post("/v1/messages/count_tokens")
        async def count_tokens(request: Request) -> Response:
            body = await self.request_body(request)
            if isinstance(body, Response):
                return body
            try:
                counted = estimate_tokens(system_text(body.get("system")), body.get("messages") or [])
            except malformed as exc:
                return anthropic_error(400, "invalid_request_error", f"malformed request: {exc}")
            return JSONResponse({"input_tokens": counted})

        return app


class _Server(uvicorn.Server):
    """Takes no signals: the demo's launcher handles Ctrl-C and stops this server itself."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serving(upstream: DemoUpstream) -> AsyncIterator[str]:
    """Serve ``upstream`` on 127.0.0.1 (a port of the kernel's choosing) in this event loop; yields its
    base URL and stops it on the way out."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        upstream.app(), log_level="warning", lifespan="off", access_log=False, timeout_graceful_shutdown=3
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:  # uvicorn has no start-up event
            if task.done():
                await task  # re-raises why it could not start
                raise RuntimeError("the demo's model upstream stopped during start-up")
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sock.close()
