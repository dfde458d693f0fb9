"""Attacks on every place a client hands the gateway a message (stream) id: REST, SSE, MCP and the UI.

A Redis stream id is two unsigned 64-bit integers, ``<ms>-<seq>``. Anything else -- an id that parses
but overflows, a negative, empty or padded one, digits from another script, a range operator, a huge
string -- must be a 400 (MCP: a tool error) whose text names the parameter, never a 500 from Redis.
The extreme valid ids (``0-0``, the largest id) are answered normally.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest

from kstest.gateway import GatewayThread
from kstest.mcp_client import ToolFailed, call, mcp_session

MAX_PART = 2**64 - 1
LAST = f"{MAX_PART}-{MAX_PART}"

# Ids an attacker would try. Each is refused everywhere; none may reach Redis.
BAD_IDS = [
    "99999999999999999999999-1",  # parses as two integers; ms overflows 64 bits
    f"1-{MAX_PART + 1}",  # seq one past 2**64 - 1
    f"{MAX_PART + 1}-0",  # ms one past 2**64 - 1
    "1" * 10_000 + "-0",  # huge
    "-1-0",  # negative
    "1--1",
    "",  # empty
    " ",
    " 1-0",  # padded
    "1-0 ",
    "1-0\n",  # a trailing newline slips through a regex that ends in $
    "١٢٣-٠",  # Arabic-Indic digits: str.isdigit() and \d accept them, Redis does not
    "１-０",  # fullwidth digits
    "1",  # a bare ms: Redis would take it, the API promises <ms>-<seq>
    "1-",
    "-",
    "1-0-0",
    "+",  # range operators and XREAD's specials
    "$",
    ">",
    "*",
    "(1-0",  # exclusive-range syntax
    "1.5-0",
    "0x1-0",
    "1e3-0",
]
# Header values are ASCII here, unpadded (h11 refuses the padding itself) and short: what a client can send.
HEADER_BAD_IDS = [b for b in BAD_IDS if b.isascii() and b == b.strip() and len(b) < 4000]


def expected(param: str) -> str:
    return f"{param}: not a message id (expected <ms>-<seq>)"


def refusals(
    send: callable,  # type: ignore[valid-type]
    param: str,
    ids: list[str] = BAD_IDS,
) -> list[str]:
    """Send each bad id; return a line per id that was not refused with 400 and the expected text."""
    wrong = []
    for bad in ids:
        try:
            reply: httpx.Response = send(bad)
        except httpx.HTTPError as exc:  # a 500 from Redis can cut the connection before any answer
            wrong.append(f"{bad[:40]!r}: {type(exc).__name__}")
            continue
        detail = (
            reply.json().get("detail")
            if reply.headers.get("content-type", "").startswith("application/json")
            else reply.text[:200]
        )
        if reply.status_code != 400 or detail != expected(param):
            wrong.append(f"{bad[:40]!r}: {reply.status_code} {str(detail)[:200]}")
    return wrong


@pytest.fixture
def op(gateway: GatewayThread) -> Iterator[httpx.Client]:
    with gateway.client(gateway.operator_token) as client:
        yield client


@pytest.fixture
def posted(op: httpx.Client) -> dict[str, str]:
    """A root message in #general with one reply."""
    root = op.post("/api/channels/general/messages", json={"text": "root"}).json()
    op.post("/api/channels/general/messages", json={"text": "reply", "reply_to": root["id"]})
    return root


def test_history_before_and_after(op: httpx.Client, posted: dict[str, str]) -> None:
    url = "/api/channels/general/messages"
    for param in ("before", "after"):
        assert refusals(lambda bad, p=param: op.get(url, params={p: bad}), param) == []


def test_thread_root_in_the_path(op: httpx.Client, posted: dict[str, str]) -> None:
    ids = [b for b in BAD_IDS if b]  # an empty segment is another route
    wrong = refusals(
        lambda bad: op.get(f"/api/channels/general/threads/{quote(bad, safe='')}"), "root_id", ids
    )
    assert wrong == []


def test_reply_to_in_channels_and_dms(gateway: GatewayThread, op: httpx.Client) -> None:
    gateway.add_principal("bob")
    channel = refusals(
        lambda bad: op.post("/api/channels/general/messages", json={"text": "x", "reply_to": bad}), "reply_to"
    )
    dm = refusals(
        lambda bad: op.post("/api/dms/bob/messages", json={"text": "x", "reply_to": bad}), "reply_to"
    )
    assert channel == [] and dm == []
    # Refused posts are not stored, and a refused DM does not even open the DM channel.
    assert op.get("/api/channels/general/messages").json()["messages"] == []
    assert "dm:bob:operator" not in {c["name"] for c in op.get("/api/channels").json()}


def sse_status(client: httpx.Client, url: str, **kwargs: object) -> httpx.Response:
    """The answer to an SSE request: an error comes whole; a stream is closed as soon as it opens."""
    with client.stream("GET", url, timeout=10, **kwargs) as reply:  # type: ignore[arg-type]
        if reply.status_code == 200:
            return httpx.Response(200, headers={"content-type": "text/event-stream"})
        reply.read()
        return reply


@pytest.mark.parametrize("url", ["/api/events", "/ui/events"])
def test_sse_resume_ids(op: httpx.Client, url: str) -> None:
    header = refusals(
        lambda bad: sse_status(op, url, headers={"Last-Event-ID": bad}), "Last-Event-ID", HEADER_BAD_IDS
    )
    query = refusals(
        lambda bad: sse_status(op, url, params={"last_event_id": bad}),
        "last_event_id",
        [b for b in BAD_IDS if b != ""],  # an empty query value means "not given"
    )
    assert header == [] and query == []


def test_ui_chat_routes(op: httpx.Client, posted: dict[str, str]) -> None:
    at = refusals(lambda bad: op.get("/ui/chat", params={"c": "general", "at": bad}), "at")
    history = refusals(
        lambda bad: op.get("/ui/chat/history", params={"c": "general", "before": bad}), "before"
    )
    feed = refusals(lambda bad: op.get("/ui/chat/history", params={"c": "*", "before": bad}), "before")
    thread = refusals(lambda bad: op.get("/ui/chat/thread", params={"c": "general", "root": bad}), "root")
    assert at == [] and history == [] and feed == [] and thread == []


async def test_mcp_chat_read_and_chat_post(gateway: GatewayThread) -> None:
    token = gateway.add_principal("alice")
    gateway.add_principal("bob")
    wrong = []
    async with mcp_session(gateway.url, token) as alice:
        for bad in BAD_IDS:
            for tool, args, param in (
                ("chat_read", {"channel": "general", "after": bad}, "after"),
                ("chat_post", {"channel": "general", "text": "x", "reply_to": bad}, "reply_to"),
                ("chat_post", {"to": "bob", "text": "x", "reply_to": bad}, "reply_to"),
            ):
                try:
                    got = await call(alice, tool, **args)
                    wrong.append(f"{tool} {bad[:40]!r}: answered {str(got)[:100]}")
                except ToolFailed as exc:
                    if f"{expected(param)} (HTTP 400)" not in str(exc):
                        wrong.append(f"{tool} {bad[:40]!r}: {str(exc)[:200]}")
        assert wrong == []
        assert await call(alice, "chat_read", channel="general") == [], "no refused post was stored"


def test_extreme_valid_ids_are_answered(op: httpx.Client, posted: dict[str, str]) -> None:
    """``0-0`` and the largest id are ids: empty pages, not errors (exclusive bounds at the ends)."""
    url = "/api/channels/general/messages"
    texts = ["root", "reply"]

    def page(**params: str) -> list[str]:
        reply = op.get(url, params=params)
        assert reply.status_code == 200, (params, reply.text)
        return [m["text"] for m in reply.json()["messages"]]

    assert page(after=LAST) == [] and page(before="0-0") == []
    assert page(after="0-0") == texts and page(before=LAST) == texts
    assert op.get(f"/api/channels/general/threads/{LAST}").json()["messages"] == []
    for params in ({"c": "general", "at": "0-0"}, {"c": "general", "at": LAST}, {"c": "*", "at": "0-0"}):
        assert op.get("/ui/chat", params=params).status_code == 200, params
    for c in ("general", "*"):
        for before in ("0-0", LAST):
            assert op.get("/ui/chat/history", params={"c": c, "before": before}).status_code == 200
    for url_ in ("/api/events", "/ui/events"):
        for start in ("0-0", LAST):
            assert sse_status(op, url_, headers={"Last-Event-ID": start}).status_code == 200


def test_a_padded_id_names_the_same_message(op: httpx.Client, posted: dict[str, str]) -> None:
    """``0001700000000000-00`` is the same id as ``1700000000000-0``: a reply through it joins the
    root's thread (not a thread of its own, keyed by the spelling)."""
    ms, seq = posted["id"].split("-")
    padded = f"000{ms}-00{seq}"
    reply = op.post("/api/channels/general/messages", json={"text": "padded", "reply_to": padded})
    assert reply.status_code == 201, reply.text
    assert reply.json()["thread"] == posted["id"] and reply.json()["reply_to"] == posted["id"]
    thread = op.get(f"/api/channels/general/threads/{padded}").json()["messages"]
    assert [m["text"] for m in thread] == ["root", "reply", "padded"]
