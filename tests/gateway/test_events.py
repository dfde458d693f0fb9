"""SSE at /api/events: live delivery, visibility, and lossless, duplicate-free resume."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gateway import events
from kstest.gateway import GatewayThread
from kstest.sse import Event, read_events
from kstest.waiting import until


async def collect(
    client: httpx.AsyncClient, n: int, headers: dict[str, str] | None = None, only: str | None = None
) -> list[Event]:
    """Connect, wait until the stream is open, then return the first ``n`` events (``only``: of that
    name: an operator's stream also carries the monitor's ``attention`` events, whenever they come)."""
    got: list[Event] = []
    async with client.stream("GET", "/api/events", headers=headers or {}, timeout=30) as response:
        assert response.status_code == 200
        async for event in read_events(response):
            if only is None or event.event == only:
                got.append(event)
            if len(got) == n:
                break
    return got


async def test_resume_loses_and_duplicates_nothing(gateway: GatewayThread) -> None:
    tokens = {n: gateway.add_principal(n) for n in ("alice", "bob", "carol")}
    async with (
        gateway.async_client(tokens["alice"]) as alice,
        gateway.async_client(tokens["bob"]) as bob,
        gateway.async_client(gateway.operator_token) as op,
    ):
        first = asyncio.create_task(collect(alice, 3))
        await asyncio.sleep(0.5)  # let the stream open; it starts at "now"
        for i in range(3):
            await op.post("/api/channels/general/messages", json={"text": f"m{i}"})
        seen = await asyncio.wait_for(first, 10)
        assert [e.data["text"] for e in seen] == ["m0", "m1", "m2"]
        assert all(e.event == "message" for e in seen)

        # While alice is away: more messages, and a DM she must never see.
        for i in range(3, 7):
            await op.post("/api/channels/general/messages", json={"text": f"m{i}"})
            if i == 4:
                await bob.post("/api/dms/carol/messages", json={"text": "private"})

        resumed = asyncio.create_task(collect(alice, 5, {"Last-Event-ID": seen[-1].id}))
        await asyncio.sleep(0.5)
        await op.post("/api/channels/general/messages", json={"text": "m7"})
        rest = await asyncio.wait_for(resumed, 10)
        texts = [e.data["text"] for e in seen + rest]
        assert texts == [f"m{i}" for i in range(8)], "nothing lost, nothing repeated, no foreign DM"
        ids = [e.id for e in seen + rest]
        assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-")))) and len(set(ids)) == len(ids)

        # The query parameter works like the header (for EventSource-less clients).
        again = await asyncio.wait_for(collect_query(alice, seen[-1].id, 2), 10)
        assert [e.data["text"] for e in again] == ["m3", "m4"]


async def collect_query(
    client: httpx.AsyncClient, last_id: str, n: int, only: str | None = None
) -> list[Event]:
    got: list[Event] = []
    async with client.stream("GET", "/api/events", params={"last_event_id": last_id}) as response:
        async for event in read_events(response):
            if only is None or event.event == only:
                got.append(event)
            if len(got) == n:
                return got
    return got


async def test_dm_events_reach_only_members(gateway: GatewayThread) -> None:
    tokens = {n: gateway.add_principal(n) for n in ("alice", "bob", "carol")}
    async with (
        gateway.async_client(tokens["carol"]) as carol,
        gateway.async_client(tokens["alice"]) as alice,
        gateway.async_client(tokens["bob"]) as bob,
    ):
        carol_events = asyncio.create_task(collect(carol, 1))
        bob_events = asyncio.create_task(collect(bob, 1))
        await asyncio.sleep(0.5)
        await alice.post("/api/dms/bob/messages", json={"text": "for bob only"})
        await alice.post("/api/channels/general/messages", json={"text": "public"})
        assert [e.data["text"] for e in await asyncio.wait_for(carol_events, 10)] == ["public"]
        assert [e.data["text"] for e in await asyncio.wait_for(bob_events, 10)] == ["for bob only"]


async def test_channel_filter_and_bad_ids(gateway: GatewayThread) -> None:
    async with gateway.async_client(gateway.operator_token) as op:
        bad = await op.get("/api/events", headers={"Last-Event-ID": "yesterday"})
        assert bad.status_code == 400
        task = asyncio.create_task(collect_channel(op, "ops"))
        await asyncio.sleep(0.5)
        await op.post("/api/channels/general/messages", json={"text": "not this"})
        await op.post("/api/channels/ops/messages", json={"text": "this"})
        assert (await asyncio.wait_for(task, 10)).data["text"] == "this"


async def collect_channel(client: httpx.AsyncClient, channel: str) -> Event:
    async with client.stream("GET", "/api/events", params={"channel": channel}) as response:
        async for event in read_events(response):
            return event
    raise AssertionError("stream ended")


async def test_sse_client_gauge(gateway: GatewayThread) -> None:
    async with gateway.async_client(gateway.operator_token) as op:
        async with op.stream("GET", "/api/events"):
            await asyncio.sleep(0.3)
            assert "kswarm_sse_clients 1.0" in (await op.get("/metrics")).text


# -- the hub follows ks:events only while a stream reads ----------------------------------------------


@pytest.fixture
def long_slices(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> GatewayThread:
    """A gateway whose hub blocks for ten minutes per read: only a nudge (or a wake-up) ends one."""
    monkeypatch.setattr(events, "BLOCK_MS", 600_000)
    monkeypatch.setattr(events, "FOLLOW_LINGER_S", 0.0)  # it stops following at its first read after
    gateway: GatewayThread = request.getfixturevalue("gateway")  # started after the patches
    return gateway


async def test_the_hub_reads_posts_only_while_a_stream_watches_and_streams_lose_nothing(
    long_slices: GatewayThread,
) -> None:
    """Nobody watching: a post is not read by the hub. The first SSE stream nudges the reader (its
    blocked read would otherwise last ten minutes); a stream that resumes from before the hub followed
    gets every event from Redis, then from memory, none twice; after the last stream the hub lets go."""
    gw = long_slices
    hub = gw.app.state.ctx.hub
    async with gw.async_client(gw.operator_token) as op:
        await until(lambda: hub.live, "the hub reads")
        first = (await op.post("/api/channels/general/messages", json={"text": "m0"})).json()["id"]
        await op.post("/api/channels/general/messages", json={"text": "m1"})
        assert not hub.following, "nobody watches: the hub does not read the posts"

        stream = asyncio.create_task(collect_query(op, first, 2, only="message"))
        await until(lambda: hub.following, "the first stream's nudge starts the hub following ks:events")
        await op.post("/api/channels/general/messages", json={"text": "m2"})
        got = await asyncio.wait_for(stream, 30)
        assert [e.data["text"] for e in got] == ["m1", "m2"], "m1 from Redis, m2 from the hub's memory"

        # The stream is gone and the linger is 0: the next event the hub reads is its last.
        await op.post("/api/channels/general/messages", json={"text": "m3"})
        await until(lambda: not hub.following, "the hub stops following once no stream reads")
        await op.post("/api/channels/general/messages", json={"text": "m4"})  # read by nobody

        # A stream from now makes the hub follow again, from m4 on; one resuming after m2 then finds
        # m3 and m4 older than the hub's memory reaches: it reads them from Redis, then m5 from memory.
        live = asyncio.create_task(collect(op, 1, only="message"))
        await until(lambda: hub.following, "a new stream starts the hub following again")
        resumed = asyncio.create_task(collect_query(op, got[-1].id, 3, only="message"))
        await op.post("/api/channels/general/messages", json={"text": "m5"})
        assert [e.data["text"] for e in await asyncio.wait_for(resumed, 30)] == ["m3", "m4", "m5"]
        assert [e.data["text"] for e in await asyncio.wait_for(live, 30)] == ["m5"]
