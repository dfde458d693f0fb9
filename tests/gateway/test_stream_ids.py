"""Attacks on every place a client hands the gateway a message (stream) id: REST, SSE, MCP and the UI.

A Redis stream id is two unsigned 64-bit integers, ``<ms>-<seq>``. Anything else -- an id that parses
but overflows, a negative, empty or padded one, digits from another script, a range operator, a huge
string -- must be a 400 (MCP: a tool error) whose text names the parameter, never a 500 from Redis.
The extreme valid ids (``0-0``, the largest id) are answered normally.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import redis as redis_sync

from kstest.gateway import GatewayThread
from kstest.mcp_client import ToolFailed, call, mcp_session
from kstest.sse import Event, read_events

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


@pytest.mark.parametrize("url", ["/api/agents/dev-1/timeline/events", "/ui/agents/dev-1/timeline/events"])
def test_timeline_sse_resume_ids(op: httpx.Client, url: str) -> None:
    """The timeline streams skipped the check: a garbage ``Last-Event-ID`` (or ``after``) reached Redis
    from inside the stream, a 200 and then a traceback. Now they refuse it like every other stream."""
    header = refusals(
        lambda bad: sse_status(op, url, headers={"Last-Event-ID": bad}), "Last-Event-ID", HEADER_BAD_IDS
    )
    assert header == []
    if url.startswith("/api/"):
        query = refusals(
            lambda bad: sse_status(op, url, params={"after": bad}), "after", [b for b in BAD_IDS if b != ""]
        )
        assert query == []
    for good in ("0-0", LAST, "007-01"):  # the extreme and padded ids resume normally
        assert sse_status(op, url, headers={"Last-Event-ID": good}).status_code == 200


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


# -- globally unique ids ---------------------------------------------------------------------------


def parts(message_id: str) -> tuple[int, int]:
    ms, seq = message_id.split("-")
    return int(ms), int(seq)


async def test_ids_from_many_channels_never_collide(gateway: GatewayThread) -> None:
    """Concurrent posts into channels and DMs: every id is unique, one sequence in the order of the
    event stream, and the same in every place it shows up (the post's answer, history, SSE, inboxes)."""
    names = [f"agent-{i}" for i in range(8)]
    tokens = {name: gateway.add_principal(name) for name in names}
    with gateway.client(gateway.operator_token) as op:
        for c in ("c1", "c2", "c3"):
            op.post("/api/channels", json={"name": c})
    async with gateway.async_client(gateway.operator_token) as op:
        watcher = asyncio.create_task(sse_messages(op, expect=96))
        await asyncio.sleep(0.5)  # the stream starts at "now"

        async def talk(i: int, name: str) -> list[dict[str, Any]]:
            async with gateway.async_client(tokens[name]) as me:
                posted = []
                for n in range(12):
                    if n % 2:  # a DM to the next agent: a channel of its own
                        url = f"/api/dms/{names[(i + 1) % len(names)]}/messages"
                    else:
                        url = f"/api/channels/{('c1', 'c2', 'c3', 'general')[(i + n) % 4]}/messages"
                    reply = await me.post(url, json={"text": f"{name} {n}"})
                    assert reply.status_code == 201, reply.text
                    posted.append(reply.json())
                return posted

        posted = [
            m for batch in await asyncio.gather(*(talk(i, n) for i, n in enumerate(names))) for m in batch
        ]
        events = await asyncio.wait_for(watcher, 30)

    ids = [m["id"] for m in posted]
    assert len(set(ids)) == len(ids), f"{len(ids) - len(set(ids))} of {len(ids)} ids collide"
    # SSE: each message's event id is its message id, and the ids rise in the stream's order.
    assert [e.id for e in events] == [e.data["id"] for e in events]
    assert [parts(e.id) for e in events] == sorted(parts(e.id) for e in events)
    assert {e.data["id"] for e in events} == set(ids)
    # Inboxes: each DM's item carries the message's id, as its own id too; no two items share one.
    for name in names:
        async with gateway.async_client(tokens[name]) as me:
            items = (await me.get("/api/inbox", params={"limit": 500})).json()["items"]
        assert len(items) == 6
        assert all(i["id"] == i["message_id"] for i in items)
    # History: the same ids, channel by channel.
    with gateway.client(gateway.operator_token) as op:
        seen = [
            m["id"]
            for c in op.get("/api/channels").json()
            for m in op.get(f"/api/channels/{c['name']}/messages", params={"limit": 500}).json()["messages"]
        ]
    assert sorted(seen, key=parts) == sorted(ids, key=parts)


async def sse_messages(client: httpx.AsyncClient, expect: int) -> list[Event]:
    got: list[Event] = []
    async with client.stream("GET", "/api/events", timeout=60) as response:
        async for event in read_events(response):
            if event.data.get("type", "message") == "message":
                got.append(event)
                if len(got) == expect:
                    break
    return got


async def test_a_client_keying_by_id_never_merges_two_messages(gateway: GatewayThread) -> None:
    """DMs from four peers (four channels) at the same time: an agent that keys its inbox by message id,
    and the UI's *All activity* feed (which skips an id it already shows), keep every one of them."""
    senders = ("bob", "carol", "dave", "erin")
    tokens = {n: gateway.add_principal(n) for n in ("alice", *senders)}
    per_sender = 30  # within one sender's rate-limit burst

    async def send(sender: str) -> None:
        async with gateway.async_client(tokens[sender]) as me:
            for i in range(per_sender):
                reply = await me.post("/api/dms/alice/messages", json={"text": f"from {sender} {i}"})
                assert reply.status_code == 201

    await asyncio.gather(*(send(s) for s in senders))
    with gateway.client(tokens["alice"]) as alice:
        items = alice.get("/api/inbox", params={"limit": 500}).json()["items"]
    by_id = {i["message_id"]: i for i in items}
    assert len(items) == 4 * per_sender
    assert len(by_id) == len(items), f"{len(items) - len(by_id)} DMs share an id with another"
    with gateway.client(gateway.operator_token) as op:
        page = op.get("/ui/chat", params={"c": "*"}).text
    shown = re.findall(r'data-id="([^"]+)"', page)
    assert len(shown) == len(set(shown)) == 50  # the feed's one page: 50 messages, 50 ids


def test_a_channel_ahead_of_the_sequence_still_takes_posts(gateway: GatewayThread) -> None:
    """A channel whose newest entry is later than the event stream's (data restored from elsewhere, a
    clock set back): a post there still succeeds, after it, and ids stay unique and rising everywhere."""
    future = f"{int(time.time() * 1000) + 10_000_000}-5"
    client = redis_sync.Redis.from_url(gateway.redis_url, decode_responses=True)
    try:
        client.xadd(
            "ks:chan:ops:stream",
            {"channel": "ops", "sender": "operator", "text": "from the future", "ts": "0", "kind": "message"},
            id=future,
        )
    finally:
        client.close()
    with gateway.client(gateway.operator_token) as op:
        here = op.post("/api/channels/ops/messages", json={"text": "now"})
        assert here.status_code == 201, here.text
        elsewhere = op.post("/api/channels/general/messages", json={"text": "elsewhere"}).json()
        texts = [m["text"] for m in op.get("/api/channels/ops/messages").json()["messages"]]
    assert parts(here.json()["id"]) > parts(future)
    assert parts(elsewhere["id"]) > parts(here.json()["id"]), "one sequence for every channel"
    assert texts == ["from the future", "now"]


def message_everywhere(client: redis_sync.Redis, text: str, inbox: str) -> dict[str, list[str]]:
    """The ids under which a message with ``text`` lies in #general, the event stream and ``inbox``."""
    return {
        key: [i for i, fields in client.xrange(key) if fields.get("text") == text]
        for key in ("ks:chan:general:stream", "ks:events", inbox)
    }


@pytest.mark.parametrize("ahead", ["ks:inbox:target", "ks:events", "ks:chan:general:stream"])
@pytest.mark.parametrize("mark", ["kept", "lost"])
def test_a_stream_ahead_of_the_sequence_mark_gets_the_post_once(
    gateway: GatewayThread, ahead: str, mark: str
) -> None:
    """The post script takes the next id after the last one it wrote (its mark), not after each
    stream's own last id. A stream ahead of that mark (another writer, a restore, a clock set back)
    refuses the XADD: what was written under the refused id is deleted again and the post lands once,
    under one id above the stream's, in the channel, the recipient's inbox and the event stream."""
    gateway.add_principal("target")
    client = redis_sync.Redis.from_url(gateway.redis_url, decode_responses=True)
    try:
        with gateway.client(gateway.operator_token) as op:
            assert op.post("/api/channels/general/messages", json={"text": "before"}).status_code == 201
            assert client.get("ks:message-sequence"), "the script keeps its mark"
            if mark == "lost":
                client.delete("ks:message-sequence")
            future = f"{int(time.time() * 1000) + 10_000_000}-5"
            client.xadd(ahead, {"text": "written by someone else", "channel": "general"}, id=future)
            text = f"@target after {ahead}"
            reply = op.post("/api/channels/general/messages", json={"text": text})
            assert reply.status_code == 201, reply.text
            next_post = op.post("/api/channels/general/messages", json={"text": "next"}).json()
        posted = reply.json()["id"]
        assert parts(posted) > parts(future)
        assert message_everywhere(client, text, "ks:inbox:target") == {
            "ks:chan:general:stream": [posted],
            "ks:events": [posted],
            "ks:inbox:target": [posted],
        }
        assert parts(next_post["id"]) > parts(posted), "one rising sequence after the fallback too"
        assert client.get("ks:message-sequence") == next_post["id"]
    finally:
        client.close()


def test_a_stream_the_post_cannot_write_leaves_nothing_half_written(gateway: GatewayThread) -> None:
    """An inbox key of the wrong type (a corrupted store) makes the post fail -- after the script has
    written the channel entry: that entry is deleted again, no event is written, and the next post to
    another agent goes through."""
    gateway.add_principal("broken")
    gateway.add_principal("fine")
    client = redis_sync.Redis.from_url(gateway.redis_url, decode_responses=True)
    try:
        client.set("ks:inbox:broken", "not a stream")
        with gateway.client(gateway.operator_token) as op:
            refused = op.post("/api/channels/general/messages", json={"text": "@broken hello"})
            assert refused.status_code >= 500
            assert op.post("/api/channels/general/messages", json={"text": "@fine hello"}).status_code == 201
        assert message_everywhere(client, "@broken hello", "ks:inbox:fine") == {
            "ks:chan:general:stream": [],
            "ks:events": [],
            "ks:inbox:fine": [],
        }
        assert len(message_everywhere(client, "@fine hello", "ks:inbox:fine")["ks:inbox:fine"]) == 1
    finally:
        client.close()
