"""Attacks: an agent writes terminal escapes and other control characters into text others will read.

The gateway refuses them at input (400 naming the field) on every route that takes text -- REST, MCP,
the Gitea-compatible API, forms -- and stores nothing of the refused write; newline and tab pass."""

from __future__ import annotations

import json

import httpx
import pytest

import gateway.input_text as input_text
from kstest.gateway import GatewayThread
from kstest.mcp_client import ToolFailed, call, mcp_session

ESC = "\x1b"
CSI_C1 = "\x9b"


@pytest.fixture
def mallory(gateway: GatewayThread) -> httpx.Client:
    gateway.add_principal("bob")
    with gateway.client(gateway.add_principal("mallory")) as client:
        yield client


def general(gateway: GatewayThread) -> list[str]:
    with gateway.client(gateway.add_principal("reader")) as reader:
        return [m["text"] for m in reader.get("/api/channels/general/messages").json()["messages"]]


def refused(reply: httpx.Response, field: str) -> str:
    assert reply.status_code == 400, reply.text
    body = reply.json()
    message = body.get("detail") or body.get("message")
    assert message.startswith(f"{field}: control character"), message
    return str(message)


@pytest.mark.parametrize(
    "text",
    [
        f"{ESC}[2J{ESC}[Hall clear",  # clear the operator's screen
        f"{ESC}]0;pwned\x07",  # set the terminal's title
        f"{ESC}]8;;http://evil.test{ESC}\\click{ESC}]8;;{ESC}\\",  # a hidden hyperlink
        "ok\rFAKE LINE",  # rewrite the line the reader sees
        f"{CSI_C1}31mred",  # the C1 CSI on its own
        "nul\x00byte",
    ],
    ids=["clear-screen", "title", "osc8-link", "carriage-return", "c1-csi", "nul"],
)
def test_chat_post_with_a_control_character_is_refused_and_not_stored(
    gateway: GatewayThread, mallory: httpx.Client, text: str
) -> None:
    refused(mallory.post("/api/channels/general/messages", json={"text": text}), "text")
    assert general(gateway) == []


def test_every_spelling_of_the_character_is_caught(gateway: GatewayThread, mallory: httpx.Client) -> None:
    url = "/api/channels/general/messages"
    headers = {"content-type": "application/json"}
    escaped = b'{"text": "a\\u001b[31mb"}'  # JSON's escape
    raw_c1 = '{"text": "a\u0085b"}'.encode()  # C1 as raw UTF-8 (NEL)
    short = b'{"text": "a\\rb"}'  # JSON's short escape
    for body in (escaped, raw_c1, short):
        refused(mallory.post(url, content=body, headers=headers), "text")
    # a control character in a key names the key
    refused(mallory.post(url, json={"text": "x", f"e{ESC}": 1}), f"e{ESC}")
    assert general(gateway) == []


def test_newline_tab_and_other_unicode_pass(gateway: GatewayThread, mallory: httpx.Client) -> None:
    text = "line one\n\tindented — ünïcode 🙂 and a backslash-r spelled out: \\r"
    reply = mallory.post("/api/channels/general/messages", json={"text": text})
    assert reply.status_code == 201, reply.text
    assert general(gateway) == [text]


def test_dm_heartbeat_topic_and_timeline_are_guarded(gateway: GatewayThread, mallory: httpx.Client) -> None:
    refused(mallory.post("/api/dms/bob/messages", json={"text": f"hi{ESC}[8m"}), "text")
    refused(mallory.post("/api/heartbeat", json={"state": "working", "doing": f"x{ESC}]0;t\x07"}), "doing")
    entry = {"kind": "note", "ts": 1.0, "summary": f"fine{ESC}[1A"}
    refused(mallory.post("/api/timeline", json={"entries": [entry]}), "entries[0].summary")
    nested = {"kind": "note", "ts": 1.0, "summary": "ok", "data": {"lines": ["a", f"b{CSI_C1}"]}}
    refused(mallory.post("/api/timeline", json={"entries": [nested]}), "entries[0].data.lines[1]")


def test_gitea_compatible_routes_answer_in_giteas_shape(mallory: httpx.Client) -> None:
    pull = {"head": "feature", "base": "main", "title": f"Fix{ESC}[2K", "body": "b"}
    reply = mallory.post("/api/v1/repos/kernels/work/pulls", json=pull)
    message = refused(reply, "title")
    assert reply.json() == {"message": message, "url": ""}


def test_query_strings_and_forms_are_guarded(gateway: GatewayThread, mallory: httpx.Client) -> None:
    refused(mallory.post("/api/channels/general/messages?note=%1b%5b2J", json={"text": "x"}), "query.note")
    form = "token=abc%1b%5b2J"
    reply = httpx.post(
        f"{gateway.url}/ui/login",
        content=form,
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    refused(reply, "form.token")
    assert general(gateway) == []


def test_a_body_past_the_limit_is_refused_before_it_is_read_whole(
    gateway: GatewayThread, mallory: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(input_text, "MAX_BODY", 1024)
    reply = mallory.post("/api/channels/general/messages", json={"text": "y" * 2048})
    assert reply.status_code == 413, reply.text
    assert general(gateway) == []


async def test_mcp_tool_call_gets_a_tool_error_naming_the_argument(gateway: GatewayThread) -> None:
    token = gateway.add_principal("mallory")
    async with mcp_session(gateway.url, token) as session:
        with pytest.raises(ToolFailed) as failed:
            await call(session, "chat_post", channel="general", text=f"{ESC}[2Jgone")
        assert "arguments.text: control character U+001B" in str(failed.value)
        # the session is still good, and only the clean post is stored
        await call(session, "chat_post", channel="general", text="clean")
    assert general(gateway) == ["clean"]


def test_mcp_request_that_is_not_a_tool_call_gets_a_json_rpc_error(gateway: GatewayThread) -> None:
    token = gateway.add_principal("mallory")
    request = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": f"evil{ESC}[2J", "version": "1"},
        },
    }
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    reply = httpx.post(f"{gateway.url}/mcp", content=json.dumps(request), headers=headers)
    assert reply.status_code == 400
    error = reply.json()
    assert error["id"] == 7 and error["error"]["code"] == -32602
    assert error["error"]["message"].startswith("params.clientInfo.name: control character U+001B")


def test_a_body_nested_past_the_parser_is_a_400_not_a_500(
    gateway: GatewayThread, mallory: httpx.Client
) -> None:
    """100,000 brackets deep: Python's JSON parser gives up with a RecursionError; the guard, which
    parses such a body first, refuses it with a 400 naming why (never a 500 from its own parse), with
    or without a control character inside; a nested field is named by its path."""
    headers = {"content-type": "application/json"}
    for inner in (b'"\\u001b"', b"1"):
        body = b'{"text": ' + b"[" * 100_000 + inner + b"]" * 100_000 + b"}"
        reply = mallory.post("/api/channels/general/messages", content=body, headers=headers)
        assert reply.status_code == 400, reply.text
        assert reply.json()["detail"] == "body: JSON nested too deeply"
    nested = {"text": "x", "deep": [[[["fine", ["b\x1b"]]]]]}
    refused(mallory.post("/api/channels/general/messages", json=nested), "deep[0][0][0][1][0]")
    assert general(gateway) == []
