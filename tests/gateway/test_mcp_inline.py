"""2025-era MCP requests answered inline (gateway/mcp_inline.py): the SDK's wire, without its per-POST
transport; whatever the inline path does not answer, the SDK answers as before."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from gateway.mcp_inline import InlineHandshakeCalls, replaying
from kstest.gateway import GatewayThread
from kstest.mcp_client import call, mcp_session

ERA = "2025-11-25"
JSON_IN = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def inline_handler(gateway: GatewayThread) -> InlineHandshakeCalls:
    app: Any = gateway.app.router.routes[0].app  # /mcp: McpAuth -> auth context -> body limit -> inline
    while not isinstance(app, InlineHandshakeCalls):
        app = app.app
    return app


@pytest.fixture
def to_sdk(gateway: GatewayThread, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The JSON-RPC method (or the HTTP method) of every request handed on to the SDK's handler."""
    handler = inline_handler(gateway)
    sdk, seen = handler.fallback, []

    async def recording(scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        if scope["method"] == "POST":
            message = await receive()
            body = message.get("body", b"")
            receive = replaying(body, receive)
        try:
            seen.append(str(json.loads(body).get("method")) if body else scope["method"])
        except (ValueError, AttributeError):
            seen.append("?")
        await sdk(scope, receive, send)

    monkeypatch.setattr(handler, "fallback", recording)
    return seen


async def test_a_claude_code_era_session_takes_only_its_handshake_through_the_sdks_transport(
    gateway: GatewayThread, to_sdk: list[str]
) -> None:
    """The official client in the 2025 handshake era: initialize and its notification go through the
    SDK's transport; every call after is answered inline."""
    token = gateway.add_principal("alice")
    async with mcp_session(gateway.url, token) as session:
        tools = await session.list_tools()
        assert "chat_post" in {t.name for t in tools.tools}
        posted = await call(session, "chat_post", channel="general", text="inline")
        assert posted["channel"] == "general"
        me = await call(session, "whoami")
        assert me["name"] == "alice"
    assert "initialize" in to_sdk
    assert not {"tools/list", "tools/call"} & set(to_sdk), to_sdk


CASES: list[tuple[str, dict[str, str], bytes]] = [
    ("tools/list", {}, b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'),
    ("ping", {}, b'{"jsonrpc": "2.0", "id": "p", "method": "ping"}'),
    (
        "a tool's own answer",
        {},
        b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}}',
    ),
    (
        "a refusal (tool error)",
        {},
        b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", '
        b'"params": {"name": "chat_read", "arguments": {"channel": "nowhere"}}}',
    ),
    (
        "an unknown tool",
        {},
        b'{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "rm_rf", "arguments": {}}}',
    ),
    ("an unknown method", {}, b'{"jsonrpc": "2.0", "id": 5, "method": "files/delete", "params": {}}'),
    ("malformed params", {}, b'{"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"x": 1}}'),
    ("no version header", {"MCP-Protocol-Version": ""}, b'{"jsonrpc": "2.0", "id": 7, "method": "ping"}'),
    ("a notification", {}, b'{"jsonrpc": "2.0", "method": "notifications/initialized"}'),
    ("a batch", {}, b'[{"jsonrpc": "2.0", "id": 8, "method": "ping"}]'),
    ("not JSON", {}, b'{"jsonrpc": "2.0", "id": 9, '),
    ("not JSON-RPC", {}, b'{"id": 10, "method": "ping"}'),
    ("JSON not accepted", {"Accept": "text/event-stream"}, b'{"jsonrpc": "2.0", "id": 11, "method": "ping"}'),
    ("text/plain", {"Content-Type": "text/plain"}, b'{"jsonrpc": "2.0", "id": 12, "method": "ping"}'),
    ("a rebinding Host", {"Host": "evil.example"}, b'{"jsonrpc": "2.0", "id": 13, "method": "ping"}'),
    (
        "a foreign Origin",
        {"Origin": "http://evil.example"},
        b'{"jsonrpc": "2.0", "id": 14, "method": "tools/call", "params": {"name": "whoami"}}',
    ),
    (
        "an unknown era",
        {"MCP-Protocol-Version": "1999-01-01"},
        b'{"jsonrpc": "2.0", "id": 15, "method": "ping"}',
    ),
]


async def answers(gateway: GatewayThread, token: str) -> list[tuple[int, str, Any]]:
    out = []
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        for _, extra, body in CASES:
            headers = {**JSON_IN, "Authorization": f"Bearer {token}", "MCP-Protocol-Version": ERA, **extra}
            headers = {k: v for k, v in headers.items() if v}
            reply = await http.post("/mcp", content=body, headers=headers)
            try:
                content: Any = reply.json()
            except ValueError:
                content = reply.text
            out.append((reply.status_code, reply.headers.get("content-type", ""), content))
    return out


async def test_every_answer_is_the_sdks_own(
    gateway: GatewayThread, monkeypatch: pytest.MonkeyPatch, to_sdk: list[str]
) -> None:
    """Each request asked twice: answered as the gateway answers it, then with the inline path stepping
    aside (the SDK's stateless transport answers everything). Status, content type and body agree,
    refusals included: a check the inline path skipped would show here as a 200 the SDK refuses."""
    token = gateway.add_principal("alice")
    inline = await answers(gateway, token)
    inlined = len(CASES) - len(to_sdk)
    monkeypatch.setattr(inline_handler(gateway), "inline_request", _step_aside)
    sdk = await answers(gateway, token)
    for (name, _, _), ours, theirs in zip(CASES, inline, sdk, strict=True):
        assert ours == theirs, f"{name}: inline {json.dumps(ours)[:300]} != SDK {json.dumps(theirs)[:300]}"
    assert inlined >= 7, "tools/list, ping, tool calls and method errors are answered inline"


async def _step_aside(*_: object) -> None:
    return None
