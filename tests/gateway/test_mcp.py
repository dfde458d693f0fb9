"""The MCP entry point with the official client: auth, every chat tool, TCP and unix socket."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from kstest.gateway import GatewayThread
from kstest.mcp_client import ToolFailed, call, mcp_session

CHAT_TOOLS = {"whoami", "channels_list", "chat_post", "chat_read", "inbox"}


@pytest.fixture
def tokens(gateway: GatewayThread) -> dict[str, str]:
    return {name: gateway.add_principal(name) for name in ("alice", "bob", "carol")}


@pytest.mark.parametrize("transport", ["tcp", "unix"])
async def test_tools_over_both_transports(
    gateway: GatewayThread, tokens: dict[str, str], transport: str
) -> None:
    uds = gateway.socket_path if transport == "unix" else None
    async with mcp_session(gateway.url, tokens["alice"], uds) as alice:
        names = {t.name for t in (await alice.list_tools()).tools}
        assert CHAT_TOOLS <= names
        assert await call(alice, "whoami") == {"name": "alice", "kind": "agent", "email": "alice@agents.test"}
        posted = await call(alice, "chat_post", channel="general", text="hello @bob")
        assert posted["mentions"] == ["bob"]
        channels = {c["name"]: c for c in await call(alice, "channels_list")}
        assert "general" in channels and "alice" in channels["general"]["members"]
    async with mcp_session(gateway.url, tokens["bob"], uds) as bob:
        items = await call(bob, "inbox")
        assert [(i["reason"], i["sender"], i["text"]) for i in items] == [("mention", "alice", "hello @bob")]
        read = await call(bob, "chat_read", channel="general")
        assert [m["text"] for m in read] == ["hello @bob"]
        assert await call(bob, "chat_read", channel="general") == [], "the read cursor advanced"


async def raw_tools_list(url: str, token: str) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.post(
            f"{url}/mcp",
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        )


async def test_bad_and_revoked_tokens_are_refused(gateway: GatewayThread, tokens: dict[str, str]) -> None:
    assert (
        await raw_tools_list(gateway.url, "ksw_forged-token-0000000000000000000000000000000")
    ).status_code == 401
    assert (await raw_tools_list(gateway.url, "alice")).status_code == 401
    async with httpx.AsyncClient() as http:
        assert (await http.post(f"{gateway.url}/mcp", json={})).status_code == 401
    async with mcp_session(gateway.url, tokens["alice"]) as alice:
        assert (await call(alice, "whoami"))["name"] == "alice"
    with gateway.client(gateway.operator_token) as op:
        op.delete("/api/principals/alice/tokens")
    assert (await raw_tools_list(gateway.url, tokens["alice"])).status_code == 401
    # The official client cannot even initialise with it (it surfaces the 401 as an MCPError).
    with pytest.raises(BaseException, match=r"TaskGroup|error"):
        async with mcp_session(gateway.url, tokens["alice"]) as alice:
            await call(alice, "whoami")


async def test_chat_post_dm_and_attribution(gateway: GatewayThread, tokens: dict[str, str]) -> None:
    async with mcp_session(gateway.url, tokens["alice"]) as alice:
        dm = await call(alice, "chat_post", to="bob", text="private plan")
        assert dm["channel"] == "dm:alice:bob"
        with pytest.raises(ToolFailed, match="exactly one of channel or to"):
            await call(alice, "chat_post", text="x", channel="general", to="bob")
        with pytest.raises(ToolFailed, match="unknown mention"):
            await call(alice, "chat_post", channel="general", text="hi @ghost")
        # There is no sender argument at all: a forged one is rejected by the schema, not obeyed.
        result = await alice.call_tool("chat_post", {"channel": "general", "text": "hi", "sender": "bob"})
        if not result.is_error:
            assert result.structured_content["channel"] == "general"
    with gateway.client(gateway.operator_token) as op:
        senders = {
            m["text"]: m["sender"] for m in op.get("/api/channels/general/messages").json()["messages"]
        }
    assert senders.get("hi", "alice") == "alice"


async def test_third_agent_cannot_read_a_dm_via_mcp(gateway: GatewayThread, tokens: dict[str, str]) -> None:
    async with mcp_session(gateway.url, tokens["alice"]) as alice:
        await call(alice, "chat_post", to="bob", text="the secret is 42")
    async with mcp_session(gateway.url, tokens["carol"]) as carol:
        with pytest.raises(ToolFailed, match="no channel"):
            await call(carol, "chat_read", channel="dm:alice:bob")
        with pytest.raises(ToolFailed, match="no channel"):
            await call(carol, "chat_post", channel="dm:alice:bob", text="let me in")
        assert "dm:alice:bob" not in {c["name"] for c in await call(carol, "channels_list")}
        assert await call(carol, "inbox") == []
    async with mcp_session(gateway.url, tokens["bob"]) as bob:
        assert [m["text"] for m in await call(bob, "chat_read", channel="dm:alice:bob")] == [
            "the secret is 42"
        ]


async def test_inbox_tool_waits_for_a_dm(gateway: GatewayThread, tokens: dict[str, str]) -> None:
    async with mcp_session(gateway.url, tokens["bob"]) as bob:
        waiter = asyncio.create_task(call(bob, "inbox", wait=20))
        await asyncio.sleep(0.5)
        assert not waiter.done()
        async with mcp_session(gateway.url, tokens["alice"]) as alice:
            await call(alice, "chat_post", to="bob", text="wake up")
        items = await asyncio.wait_for(waiter, 10)
        assert [i["text"] for i in items] == ["wake up"]


async def test_tool_definitions_stay_small(gateway: GatewayThread, tokens: dict[str, str]) -> None:
    """Tool definitions are paid for in every agent's context; docs/mcp.md reports their size."""
    async with mcp_session(gateway.url, tokens["alice"]) as alice:
        tools = (await alice.list_tools()).tools
    chat = [t for t in tools if t.name in CHAT_TOOLS]
    size = len(json.dumps([t.model_dump(by_alias=True, exclude_none=True) for t in chat]))
    assert all(len(t.description or "") <= 120 for t in chat)
    assert size < 3000, size
