"""The SDK transport's guards as the gateway serves it (the session manager's handler, mounted directly
at /mcp): DNS-rebinding Host and Origin checks and the request body limit hold for an authenticated
caller, on both protocol eras -- the 2025 handshake era and 2026-07-28 single exchanges."""

from __future__ import annotations

import httpx
import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from kstest.gateway import GatewayThread

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
ERAS = ("2025-11-25", "2026-07-28")


def call_whoami(era: str) -> dict[str, object]:
    """A raw tools/call; a 2026-07-28 request carries its own envelope (no handshake before it)."""
    params: dict[str, object] = {"name": "whoami", "arguments": {}}
    if era == "2026-07-28":
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": era,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}


def era_headers(token: str, era: str) -> dict[str, str]:
    headers = {**ACCEPT, "Authorization": f"Bearer {token}", "MCP-Protocol-Version": era}
    if era == "2026-07-28":  # the routing headers a 2026-07-28 request repeats from its body
        headers |= {"Mcp-Method": "tools/call", "Mcp-Name": "whoami"}
    return headers


@pytest.fixture
def token(gateway: GatewayThread) -> str:
    return gateway.add_principal("alice")


@pytest.mark.parametrize("era", ERAS)
async def test_a_foreign_host_is_refused_even_with_a_valid_token(
    gateway: GatewayThread, token: str, era: str
) -> None:
    """A page on evil.example that rebinds its name to 127.0.0.1 reaches us with its own Host header."""
    headers = {**era_headers(token, era), "Host": "evil.example"}
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        reply = await http.post("/mcp", json=call_whoami(era), headers=headers)
    assert reply.status_code in (400, 421), reply.text
    assert "alice" not in reply.text


@pytest.mark.parametrize("era", ERAS)
async def test_a_foreign_origin_is_refused_even_with_a_valid_token(
    gateway: GatewayThread, token: str, era: str
) -> None:
    headers = era_headers(token, era)
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        reply = await http.post(
            "/mcp", json=call_whoami(era), headers={**headers, "Origin": "http://evil.example"}
        )
        assert reply.status_code == 403, reply.text
        assert "alice" not in reply.text
        ours = await http.post("/mcp", json=call_whoami(era), headers={**headers, "Origin": gateway.url})
    assert ours.status_code == 200, ours.text
    assert "alice" in ours.text


async def test_an_oversized_body_is_refused_before_parsing(gateway: GatewayThread, token: str) -> None:
    huge = (
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "chat_post", "arguments": '
    )
    huge += b'{"channel": "general", "text": "' + b"x" * (5 * 1024 * 1024) + b'"}}}'
    headers = {**ACCEPT, "Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        reply = await http.post("/mcp", content=huge, headers=headers)
        assert reply.status_code == 413, reply.text
        history = await http.get(
            "/api/channels/general/messages", headers={"Authorization": f"Bearer {token}"}
        )
    assert history.json()["messages"] == [], "nothing of the refused body was posted"


async def test_single_exchange_era_posts_as_the_token_owner(gateway: GatewayThread, token: str) -> None:
    """The SDK client's 2026-07-28 mode (no handshake, one POST per call) reaches the same tools."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        Client(streamable_http_client(f"{gateway.url}/mcp", http_client=http), mode="2026-07-28") as client,
    ):
        posted = await client.call_tool("chat_post", {"channel": "general", "text": "hi from 2026"})
        assert not posted.is_error, posted
        assert posted.structured_content is not None
        assert posted.structured_content["channel"] == "general"
        forged = await client.call_tool("chat_post", {"channel": "general", "text": "x", "sender": "bob"})
    with gateway.client(token) as rest:
        messages = rest.get("/api/channels/general/messages").json()["messages"]
    assert [(m["sender"], m["text"]) for m in messages if m["text"] == "hi from 2026"] == [
        ("alice", "hi from 2026")
    ]
    assert all(m["sender"] == "alice" for m in messages), f"a sender argument was obeyed: {forged}"


def test_the_request_state_boundary_stays_when_the_otel_span_goes(gateway: GatewayThread) -> None:
    """Dropping the SDK's OpenTelemetry span (no exporter here) must not drop its security middleware."""
    assert gateway.app is not None
    server = gateway.app.state.mcp
    kinds = {type(m).__name__ for m in server.middleware}
    assert "RequestStateBoundary" in kinds
    assert "OpenTelemetryMiddleware" not in kinds


def test_the_gateway_holds_no_mcp_session_for_a_client(gateway: GatewayThread, token: str) -> None:
    """An agent's budget of MCP sessions is none: the transport is stateless, so a thousand handshakes
    leave nothing behind in the gateway (no session id is handed out; none is needed for a call)."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    with httpx.Client(base_url=gateway.url, headers=headers, timeout=30) as http:
        reply = http.post("/mcp", json=init)
        assert reply.status_code == 200 and "mcp-session-id" not in reply.headers
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "whoami", "arguments": {}},
        }
        answered = http.post("/mcp", json=call)
        assert answered.status_code == 200 and not answered.json()["result"].get("isError"), answered.text
