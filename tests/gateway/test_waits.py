"""Waiting costs no Redis connection each: the event hub, the bounded pool, and the 503 when it is full.

These are correctness tests (every post lands, every waiter wakes, a full pool is a clear 503), not
timing tests: the only waits are generous bounds on things that must happen.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis as redis_sync
from redis.asyncio import Redis

from gateway.metrics import GatewayMetrics
from gateway.principals import PrincipalKind, PrincipalStore
from gateway.redis_pool import RedisBusy, RedisPool
from kstest.gateway import GatewayThread
from kstest.waiting import until

WAITERS = 160  # above redis-py's default pool of 100, which one blocked wait each used to exhaust
POOL = 8  # far below the waiters: they must hold none of it


async def create_agents(redis_url: str, names: list[str]) -> dict[str, str]:
    redis = Redis.from_url(redis_url, decode_responses=True)
    try:
        store = PrincipalStore(redis, "test")
        return {name: (await store.create(name, PrincipalKind.agent))[1] for name in names}
    finally:
        await redis.aclose()


def redis_clients(redis_url: str) -> int:
    client = redis_sync.Redis.from_url(redis_url)
    try:
        return int(client.info("clients")["connected_clients"]) - 1  # not this one
    finally:
        client.close()


@pytest.fixture
def small_pool_gateway(clean_redis: str, short_tmp: Path) -> Iterator[GatewayThread]:
    gw = GatewayThread(
        short_tmp / "home", clean_redis, redis_pool_size=POOL, redis_pool_wait=10.0, rate_limit_per_sec=0
    )
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


@pytest.mark.slow
async def test_many_blocked_waiters_share_one_reader(small_pool_gateway: GatewayThread) -> None:
    gw = small_pool_gateway
    hub = gw.app.state.ctx.hub
    names = [f"w{i:03d}" for i in range(WAITERS)]
    tokens = await create_agents(gw.redis_url, names)
    # Other clients of this session's Redis (earlier tests' leftovers) are not ours to count.
    before = redis_clients(gw.redis_url)
    limits = httpx.Limits(max_connections=WAITERS + 8, max_keepalive_connections=WAITERS + 8)
    async with httpx.AsyncClient(base_url=gw.url, limits=limits, timeout=60) as http:
        waits = [
            asyncio.create_task(
                http.get("/api/inbox", params={"wait": 45}, headers={"Authorization": f"Bearer {tokens[n]}"})
            )
            for n in names
        ]
        await until(lambda: hub.waiters() == WAITERS, f"{WAITERS} waiters registered on the hub")
        grown = redis_clients(gw.redis_url) - before
        # At most the pool filling up: not one connection per waiter.
        assert grown <= POOL, f"{grown} more Redis connections for {WAITERS} waiters"

        op = {"Authorization": f"Bearer {gw.operator_token}"}
        posts = [
            http.post("/api/channels/general/messages", json={"text": f"for @{n}"}, headers=op) for n in names
        ]
        answers = await asyncio.gather(*posts)
        assert [a.status_code for a in answers] == [201] * WAITERS, "every post succeeds"
        replies = await asyncio.wait_for(asyncio.gather(*waits), 60)
    for name, reply in zip(names, replies, strict=True):
        assert reply.status_code == 200
        assert [i["text"] for i in reply.json()["items"]] == [f"for @{name}"], (
            "every waiter wakes with its own"
        )
    ids = [a.json()["id"] for a in answers]
    assert len(set(ids)) == WAITERS


async def test_a_waiter_is_served_across_a_reader_reconnect(gateway: GatewayThread) -> None:
    """The hub's connection is killed under a blocked wait: the wait still returns the DM posted after."""
    tokens = {n: gateway.add_principal(n) for n in ("alice", "bob")}
    hub = gateway.app.state.ctx.hub
    async with gateway.async_client(tokens["bob"]) as bob, gateway.async_client(tokens["alice"]) as alice:
        waiter = asyncio.create_task(bob.get("/api/inbox", params={"wait": 30}))
        await until(lambda: hub.waiters() == 1, "bob waits on the hub")
        epoch = hub.epoch
        admin = redis_sync.Redis.from_url(gateway.redis_url, decode_responses=True)
        try:
            readers = [c for c in admin.client_list() if c.get("cmd") == "xread"]
            assert readers, "the hub blocks in XREAD on its own connection"
            for client in readers:
                admin.client_kill_filter(_id=client["id"])
        finally:
            admin.close()
        await until(lambda: hub.epoch > epoch and hub.live, "the hub reconnects")
        assert (await alice.post("/api/dms/bob/messages", json={"text": "after the gap"})).status_code == 201
        reply = await asyncio.wait_for(waiter, 40)
    assert [i["text"] for i in reply.json()["items"]] == ["after the gap"]


async def test_full_pool_waits_then_refuses_with_503_logged_once(
    clean_redis: str, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = GatewayMetrics()
    pool = RedisPool.from_url(clean_redis, metrics=metrics, max_connections=1, timeout=0.2)
    redis = Redis(connection_pool=pool)
    try:
        held = await pool.get_connection()
        caplog.set_level(logging.WARNING, logger="kswarm.redis")
        for _ in range(3):
            with pytest.raises(RedisBusy) as refused:
                await redis.ping()
            assert refused.value.status == 503 and refused.value.headers["Retry-After"] == "1"
        assert metrics.redis_pool_exhausted._value.get() == 3
        # Only the pool's own lines: another gateway of this session's Redis may log its own things.
        ours = [r for r in caplog.records if r.name == "kswarm.redis"]
        lines = [r for r in ours if "pool exhausted" in r.getMessage()]
        assert len(lines) == 1, "one line per interval, not one per refusal"
        assert "in the last 0 s" in lines[0].getMessage(), "the window counted from the first refusal"
        assert not any(r.exc_info for r in ours), "no traceback"
        await pool.release(held)
        assert await redis.ping(), "a released connection serves the next command"
    finally:
        await redis.aclose()


def test_http_answers_503_with_retry_after_when_the_pool_stays_full(
    clean_redis: str, short_tmp: Path
) -> None:
    gw = GatewayThread(short_tmp / "home", clean_redis, redis_pool_size=4, redis_pool_wait=0.3)
    gw.start()
    assert gw._loop is not None
    pool = gw.app.state.ctx.redis.connection_pool
    held: list[object] = []

    async def hog() -> None:  # in the gateway's loop: take every connection the pool will give
        while True:
            try:
                held.append(await pool.get_connection())
            except RedisBusy:
                return

    async def give_back() -> None:
        for connection in held:
            await pool.release(connection)

    try:
        asyncio.run_coroutine_threadsafe(hog(), gw._loop).result(30)
        with gw.client(gw.operator_token) as op:
            busy = op.get("/api/channels")
            assert busy.status_code == 503, busy.text
            assert busy.headers["Retry-After"] == "1" and "Redis connections" in busy.json()["detail"]
            mcp = op.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            assert mcp.status_code == 503 and mcp.headers["Retry-After"] == "1"
            asyncio.run_coroutine_threadsafe(give_back(), gw._loop).result(30)
            assert op.get("/api/channels").status_code == 200
            metrics = op.get("/metrics").text
        exhausted = [ln for ln in metrics.splitlines() if ln.startswith("kswarm_redis_pool_exhausted_total")]
        assert exhausted and float(exhausted[0].split()[-1]) >= 2
    finally:
        gw.stop()


async def test_revoking_a_token_ends_its_blocked_waits_and_loses_nothing(gateway: GatewayThread) -> None:
    """bob's inbox wait is blocked when the operator revokes his token: the wait ends with a 401 (it used
    to run on and hand out the DM posted next), and that DM stays unread for his next token."""
    tokens = {n: gateway.add_principal(n) for n in ("alice", "bob")}
    hub = gateway.app.state.ctx.hub
    async with gateway.async_client(tokens["bob"]) as bob, gateway.async_client(tokens["alice"]) as alice:
        waiter = asyncio.create_task(bob.get("/api/inbox", params={"wait": 60}))
        await until(lambda: hub.waiters() == 1, "bob waits on the hub")
        async with gateway.async_client(gateway.operator_token) as op:
            assert (await op.delete("/api/principals/bob/tokens")).json() == {"revoked": 1}
            await until(lambda: waiter.done() or hub.waiters() == 0, "the revocation reaches bob's wait")
            assert (await alice.post("/api/dms/bob/messages", json={"text": "secret"})).status_code == 201
            reply = await asyncio.wait_for(waiter, 50)  # a bound on a must-happen: the wait was for 60 s
            assert reply.status_code == 401, reply.text
            fresh = (await op.post("/api/principals/bob/tokens")).json()["token"]
    async with gateway.async_client(fresh) as bob_again:
        items = (await bob_again.get("/api/inbox")).json()["items"]
    assert [i["text"] for i in items] == ["secret"]


async def test_attack_one_agent_cannot_hold_more_than_its_waits(gateway: GatewayThread) -> None:
    """mallory opens every wait she may (8 inbox long polls), then tries more -- another inbox wait, an
    event stream, her timeline's stream: each is a 429 naming the limit, while bob still waits and is
    served; once her waits end she may wait again. (Before the budget, she could open thousands.)"""
    tokens = {n: gateway.add_principal(n) for n in ("mallory", "bob")}
    budget = gateway.app.state.ctx.waits
    limit = gateway.settings.max_waits_per_agent
    limits = httpx.Limits(max_connections=limit + 8)
    async with (
        gateway.async_client(tokens["mallory"]) as mallory,
        gateway.async_client(tokens["bob"]) as bob,
        httpx.AsyncClient(base_url=gateway.url, limits=limits, timeout=60) as http,
    ):
        auth = {"Authorization": f"Bearer {tokens['mallory']}"}
        held = [
            asyncio.create_task(http.get("/api/inbox", params={"wait": 60}, headers=auth))
            for _ in range(limit)
        ]
        await until(lambda: budget.open("mallory") == limit, f"mallory holds {limit} waits")
        more = await mallory.get("/api/inbox", params={"wait": 30})
        assert more.status_code == 429 and more.headers["retry-after"] == "1"
        assert "max_waits_per_agent" in more.json()["detail"]
        for path in ("/api/events", "/api/agents/mallory/timeline/events"):
            async with mallory.stream("GET", path) as stream:
                assert stream.status_code == 429, path
        assert (await mallory.get("/api/inbox")).status_code == 200, "a read that does not wait is fine"

        bobs = asyncio.create_task(bob.get("/api/inbox", params={"wait": 60}))
        await until(lambda: budget.open("bob") == 1, "bob waits too")
        assert (await mallory.post("/api/dms/bob/messages", json={"text": "hi bob"})).status_code == 201
        assert (await asyncio.wait_for(bobs, 50)).json()["items"][0]["text"] == "hi bob"

        assert (await bob.post("/api/dms/mallory/messages", json={"text": "wake"})).status_code == 201
        replies = await asyncio.wait_for(asyncio.gather(*held), 50)
        assert [r.status_code for r in replies] == [200] * limit
        await until(lambda: budget.open("mallory") == 0, "her waits are released")
        again = await mallory.get("/api/inbox", params={"wait": 0.1})
        assert again.status_code == 200


async def test_empty_waits_end_spread_over_their_last_tenth(
    gateway: GatewayThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Agents that began waiting together must not all come back together at every wait's end (a herd
    of re-armed waits delays delivery to everyone): each wait is cut to a random point of its last
    tenth. Observed where the wait is handed to the hub, so no test waits it out."""
    chat = gateway.app.state.ctx.chat
    asked: list[float] = []

    async def on_hub(principal: object, stream: str, cursor: str, wait: float, *rest: object) -> list:
        asked.append(wait)
        return []

    monkeypatch.setattr(chat, "_wait_on_hub", on_hub)
    token = gateway.add_principal("carol")
    async with gateway.async_client(token) as carol:
        for _ in range(40):
            assert (await carol.get("/api/inbox", params={"wait": 10})).json()["items"] == []
    assert len(asked) == 40
    assert all(9.0 <= wait <= 10.0 for wait in asked), asked
    assert len(set(asked)) > 1, "spread, not one shorter wait for everyone"
