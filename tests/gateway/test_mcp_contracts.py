"""What third-party MCP clients read: the 401 challenge and RFC 9728 metadata, and unknown tools as the
spec's JSON-RPC error. (MCP Inspector read a bare 401 as "interactive OAuth required"; the user never
learnt that the token was bad.)"""

from __future__ import annotations

import re

import httpx
import pytest

from kstest.gateway import GatewayThread
from kstest.mcp_client import mcp_session

ACCEPT = {"Accept": "application/json, text/event-stream"}
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


def challenge(reply: httpx.Response) -> dict[str, str]:
    header = reply.headers.get("www-authenticate", "")
    assert header.startswith("Bearer "), header
    return dict(re.findall(r'(\w+)="([^"]*)"', header))


async def test_401_names_the_protected_resource_metadata(gateway: GatewayThread) -> None:
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        missing = await http.post("/mcp", json=LIST, headers=ACCEPT)
        assert missing.status_code == 401
        params = challenge(missing)
        assert "error" not in params, "RFC 6750: no error code when no token was sent"
        assert params["resource_metadata"] == f"{gateway.url}/.well-known/oauth-protected-resource/mcp"

        forged = await http.post(
            "/mcp", json=LIST, headers={**ACCEPT, "Authorization": "Bearer ksw_forged-000000000000000000000"}
        )
        assert forged.status_code == 401
        assert challenge(forged)["error"] == "invalid_token"
        body = forged.json()
        assert body["error"] == "invalid_token" and "operator" in body["error_description"]

        # The metadata is public (a client without a valid token must be able to read it).
        for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"):
            meta = await http.get(path)
            assert meta.status_code == 200
            doc = meta.json()
            assert doc["resource"] == f"{gateway.url}/mcp"
            assert doc["bearer_methods_supported"] == ["header"]
            assert "authorization_servers" not in doc, "no OAuth server to send a client to"

        # A client that falls back to dynamic client registration learns why in RFC 7591's form.
        register = await http.post("/register", json={"redirect_uris": ["http://localhost/cb"]})
        assert register.status_code == 400 and "operator" in register.json()["error_description"]


async def test_challenge_names_the_host_the_client_used_only_when_it_is_ours(gateway: GatewayThread) -> None:
    """A forged Host cannot make the 401 point a client at someone else's metadata."""
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        reply = await http.post("/mcp", json=LIST, headers={**ACCEPT, "Host": "evil.example"})
    assert reply.status_code in (401, 421)
    if reply.status_code == 401:
        assert "evil.example" not in reply.headers.get("www-authenticate", "")


async def test_revoked_token_is_refused_with_the_challenge(gateway: GatewayThread) -> None:
    token = gateway.add_principal("alice")
    with gateway.client(gateway.operator_token) as op:
        op.delete("/api/principals/alice/tokens")
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        reply = await http.post("/mcp", json=LIST, headers={**ACCEPT, "Authorization": f"Bearer {token}"})
    assert reply.status_code == 401 and challenge(reply)["error"] == "invalid_token"


async def test_unknown_tool_is_a_json_rpc_error(gateway: GatewayThread) -> None:
    token = gateway.add_principal("alice")
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        reply = await http.post(
            "/mcp",
            headers={**ACCEPT, "Authorization": f"Bearer {token}"},
            json={
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {"name": "no_such_tool", "arguments": {}},
            },
        )
    assert reply.status_code == 200
    answer = reply.json()
    assert "result" not in answer, "not a tool result an agent could mistake for the tool's own failure"
    assert answer["id"] == 7 and answer["error"]["code"] == -32602
    assert "no_such_tool" in answer["error"]["message"]
    # Through the official client it is an exception, not an is_error result.
    async with mcp_session(gateway.url, token) as session:
        with pytest.raises(Exception, match="no_such_tool"):
            await session.call_tool("no_such_tool", {})
