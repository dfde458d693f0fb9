"""The token cache (gateway/token_cache.py, gateway/auth_changes.py), attacked: a grant cached on one
replica must not outlive a revocation or a quarantine made anywhere, a dropped subscription or a
check racing a change. Two gateways on one Redis stand for two replicas."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis as redis_sync
from redis.asyncio import Redis

from gateway import token_cache
from gateway.auth import TokenCheck
from gateway.auth_changes import LEASE_S
from gateway.principals import Principal, PrincipalKind, PrincipalStore, hash_token
from gateway.redis_facade import str_redis
from gateway.token_cache import TokenCache
from kstest.gateway import GatewayThread
from kstest.waiting import wait_for


@pytest.fixture
def replica(gateway: GatewayThread, short_tmp: Path) -> Iterator[GatewayThread]:
    """A second gateway on the first one's Redis, with the same operator."""
    other = GatewayThread(short_tmp / "home-b", gateway.redis_url, operator_token=gateway.operator_token)
    other.start()
    try:
        yield other
    finally:
        other.stop()


def leased(gw: GatewayThread) -> bool:
    assert gw.app is not None
    return bool(gw.app.state.ctx.tokens.cache.usable())


def cache_hits(gw: GatewayThread) -> float:
    assert gw.app is not None
    registry = gw.app.state.ctx.metrics.registry
    return registry.get_sample_value("kswarm_token_checks_total", {"source": "cache"}) or 0.0


def assert_granted_from_cache(gw: GatewayThread, client: httpx.Client) -> None:
    """Two requests with the client's token; the second is answered from the replica's cache."""
    wait_for(lambda: leased(gw), what="the replica's cache lease")
    assert client.get("/api/me").status_code == 200
    before = cache_hits(gw)
    assert client.get("/api/me").status_code == 200
    assert cache_hits(gw) > before, "the grant was not served from the cache"


async def revoke_directly(redis_url: str, token: str) -> bool:
    """Revoke one token with a PrincipalStore of its own, as `kswarm` setup scripts do (no gateway)."""
    redis = str_redis(Redis.from_url(redis_url, decode_responses=True))
    try:
        return await PrincipalStore(redis, "test").revoke_token(token)
    finally:
        await redis.aclose()


def kill_subscription(gw: GatewayThread) -> None:
    """Close the replica's subscription from Redis's side (what a Redis restart or a dropped link does)."""
    assert gw.app is not None
    name = gw.app.state.ctx.token_listener.connection_name
    client = redis_sync.Redis.from_url(gw.redis_url, decode_responses=True)
    try:
        ids = [c["id"] for c in client.client_list() if c.get("name") == name]
        assert ids, f"no connection named {name}"
        for client_id in ids:
            client.client_kill_filter(_id=client_id)
    finally:
        client.close()


def test_revoked_through_one_replica_is_refused_by_the_other_on_the_next_request(
    gateway: GatewayThread, replica: GatewayThread
) -> None:
    token = gateway.add_principal("alice")
    with replica.client(token) as on_b, gateway.client(token) as on_a:
        assert_granted_from_cache(replica, on_b)
        assert_granted_from_cache(gateway, on_a)
        with gateway.client(gateway.operator_token) as op:
            assert op.delete("/api/principals/alice/tokens").json() == {"revoked": 1}
        assert on_b.get("/api/me").status_code == 401, "replica B granted a token revoked through A"
        assert on_a.get("/api/me").status_code == 401


def test_quarantine_on_one_replica_is_refused_by_the_other_and_release_works(
    gateway: GatewayThread, replica: GatewayThread
) -> None:
    token = gateway.add_principal("alice")
    with gateway.client(token) as on_a:
        assert_granted_from_cache(gateway, on_a)
        with replica.client(replica.operator_token) as op:
            assert op.post("/api/principals/alice/disable").json()["disabled"] is True
        assert on_a.get("/api/me").status_code == 401, "a quarantined principal was granted from the cache"
        with replica.client(replica.operator_token) as op:
            assert op.post("/api/principals/alice/enable").json()["disabled"] is False
        assert on_a.get("/api/me").status_code == 200


def test_token_revoked_outside_any_gateway_is_refused_at_once(gateway: GatewayThread) -> None:
    """A rotation by a setup script (its own PrincipalStore): the old token stops at once, the new works."""
    old = gateway.add_principal("alice")
    with gateway.client(gateway.operator_token) as op:
        new = op.post("/api/principals/alice/tokens").json()["token"]
    with gateway.client(old) as with_old, gateway.client(new) as with_new:
        assert_granted_from_cache(gateway, with_old)
        assert asyncio.run(revoke_directly(gateway.redis_url, old)) is True
        assert with_old.get("/api/me").status_code == 401
        assert with_new.get("/api/me").status_code == 200


def test_cached_grant_is_not_used_after_the_subscription_drops(
    gateway: GatewayThread, replica: GatewayThread
) -> None:
    token = gateway.add_principal("alice")
    assert replica.app is not None
    listener = replica.app.state.ctx.token_listener
    with replica.client(token) as on_b:
        assert_granted_from_cache(replica, on_b)
        subscribed_before = listener.subscriptions
        kill_subscription(replica)
        assert asyncio.run(revoke_directly(gateway.redis_url, token)) is True
        assert on_b.get("/api/me").status_code == 401, "a grant cached before the drop was used"
    wait_for(lambda: listener.subscriptions > subscribed_before, what="the replica to subscribe again")


def test_a_replica_that_cannot_resubscribe_stops_using_its_cache(
    gateway: GatewayThread, replica: GatewayThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replica's subscription is gone and it cannot make a new one: a revocation then waits for
    its lease to end (it never acks), and its cached grant is not used after that."""
    token = gateway.add_principal("alice")
    assert replica.app is not None
    listener = replica.app.state.ctx.token_listener
    with replica.client(token) as on_b:
        assert_granted_from_cache(replica, on_b)

        async def refused(pubsub: object, channel: str) -> None:
            raise redis_sync.ConnectionError("Redis refuses the subscription (the test)")

        monkeypatch.setattr(token_cache, "subscribed", refused)
        kill_subscription(replica)
        assert asyncio.run(revoke_directly(gateway.redis_url, token)) is True
        assert on_b.get("/api/me").status_code == 401, "the replica granted from a cache it cannot keep"
        monkeypatch.undo()
        subscribed_before = listener.subscriptions
        wait_for(lambda: listener.subscriptions > subscribed_before, what="the replica to subscribe again")


async def test_a_check_that_read_before_a_change_does_not_refill_the_cache(clean_redis: str) -> None:
    """The race: a check reads the principal, the change is announced (the cache dropped) before the
    check stores what it read. What it read must not be cached."""
    redis = str_redis(Redis.from_url(clean_redis, decode_responses=True))
    try:
        _, token = await PrincipalStore(redis, "test").create("alice", PrincipalKind.agent)
        cache = TokenCache()
        cache.renew(time.monotonic())  # leased, as a running CacheListener keeps it
        check = TokenCheck(redis, cache)
        read = check._script

        async def read_then_change(**kwargs: object) -> object:
            raw = await read(**kwargs)  # type: ignore[arg-type]
            cache.invalidate()  # the listener took a change while this read was in flight
            return raw

        check._script = read_then_change  # type: ignore[assignment]
        assert (await check.verify(token)) is not None, "this check itself ran before the change"
        assert cache.get(hash_token(token)) is None, "a grant read before the change was cached"
        check._script = read
        assert (await check.verify(token)) is not None
        assert cache.get(hash_token(token)) is not None, "a check after the change is cached"
    finally:
        await redis.aclose()


def test_the_cache_is_bounded_keyed_by_hash_and_dropped_when_its_lease_lapses() -> None:
    cache = TokenCache(max_entries=2)
    cache.renew(time.monotonic())
    people = [Principal(name=f"a{i}", kind=PrincipalKind.agent, email=f"a{i}@x") for i in range(3)]
    for i, p in enumerate(people):
        cache.put(hash_token(f"ksw_{i}"), p, cache.generation)
    assert len(cache) == 2 and cache.get(hash_token("ksw_0")) is None, "the least recently used goes"
    assert cache.get(hash_token("ksw_2")) == people[2]
    assert cache.get("ksw_2") is None, "keyed by the token's hash, never the token"
    cache.suspend()
    assert cache.get(hash_token("ksw_2")) is None and len(cache) == 0
    cache.renew(time.monotonic() - LEASE_S)  # a lease that has already ended
    cache.put(hash_token("ksw_2"), people[2], cache.generation)
    assert len(cache) == 0, "nothing is stored without a lease"
