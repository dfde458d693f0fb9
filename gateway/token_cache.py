"""A replica's in-process cache of token -> principal, and the listener that keeps it safe to use.

``TokenCache`` maps a token's SHA-256 (never the token) to its principal, least recently used first
out, for ``TokenCheck`` (``gateway.auth``): a request whose token is cached costs no Redis round trip.
It is used only while the replica holds a lease, and an entry is only stored by a check that started
in the cache's current *generation*: every invalidation bumps the generation, so a check that read
Redis before a change and returns after the cache was dropped cannot put back what it read.

``CacheListener`` is the replica's half of the protocol in ``gateway.auth_changes``: one subscription
(a connection of its own) to ``ks:auth:changed``; a message drops the cache and is acked; a ping every
``PING_S`` renews the lease; a subscription that fails or stops answering suspends the cache (every
check goes to Redis) until a new subscription is confirmed and the cache dropped once more.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

from redis.exceptions import RedisError

from gateway import keys
from gateway.auth_changes import LEASE_S, PING_S, dedicated_client, subscribed
from gateway.cancellation import nap, rounds, stop_task
from gateway.principals import Principal
from gateway.redis_facade import StrRedis

log = logging.getLogger("kswarm.auth")

CACHE_ENTRIES = 8192  # tokens cached per replica (a few hundred bytes each)
LOG_INTERVAL_S = 30.0  # a failing subscription says so at most this often

# KEYS[1]: the replicas hash; ARGV: the replica, the lease in ms. The lease is Redis time + LEASE_S,
# taken after the ping it renews was sent, so it ends after the replica's local lease does.
_HEARTBEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], ARGV[1], now + tonumber(ARGV[2]))
return now
"""


class TokenCache:
    """Token hash -> principal, bounded, usable only under a lease (see the module)."""

    def __init__(self, max_entries: int = CACHE_ENTRIES) -> None:
        self.max_entries = max_entries
        self.generation = 0  # bumped by every invalidation
        self._entries: OrderedDict[str, Principal] = OrderedDict()
        self._lease_ends = 0.0  # time.monotonic(); 0: suspended

    def usable(self) -> bool:
        return time.monotonic() < self._lease_ends

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, token_hash: str) -> Principal | None:
        if not self.usable():
            if self._entries:  # a lapsed lease may have missed a change: nothing cached survives it
                self.invalidate()
            return None
        principal = self._entries.get(token_hash)
        if principal is not None:
            self._entries.move_to_end(token_hash)
        return principal

    def put(self, token_hash: str, principal: Principal, generation: int) -> None:
        """Store what a check read, unless the cache was dropped since it started (``generation``)."""
        if generation != self.generation or not self.usable():
            return
        self._entries[token_hash] = principal
        self._entries.move_to_end(token_hash)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def invalidate(self) -> None:
        self._entries.clear()
        self.generation += 1

    def suspend(self) -> None:
        """Stop using the cache until a lease is granted again."""
        self._lease_ends = 0.0
        self.invalidate()

    def renew(self, since: float) -> None:
        """Extend the lease to ``since`` (when the answered ping was sent) + ``LEASE_S``."""
        self._lease_ends = max(self._lease_ends, since + LEASE_S)


class CacheListener:
    """The replica's subscription to changes; run for the app's lifetime (``running``)."""

    def __init__(self, redis: StrRedis, cache: TokenCache) -> None:
        self.redis = redis  # the pool: heartbeats, acks and the version are single quick commands
        self.cache = cache
        self.replica = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.connection_name = f"kswarm-auth-{self.replica}"
        self.subscriptions = 0  # confirmed subscriptions so far (a reconnect adds one)
        self._heartbeat = redis.register_script(_HEARTBEAT)
        self._last_log = -LOG_INTERVAL_S

    @asynccontextmanager
    async def running(self) -> AsyncIterator[CacheListener]:
        task = asyncio.create_task(self._run(), name="kswarm-token-cache")
        try:
            yield self
        finally:
            await stop_task(task, "the token cache's listener")
            self.cache.suspend()
            with suppress(RedisError, OSError):
                await self.redis.hdel(keys.AUTH_REPLICAS, self.replica)

    async def _run(self) -> None:
        failures = 0
        for _ in rounds():
            client = dedicated_client(self.redis, self.connection_name)
            pubsub = client.pubsub()
            try:
                await subscribed(pubsub, keys.AUTH_CHANGED)
                await self._clean_start()
                failures = 0
                await self._listen(pubsub)
            except (RedisError, OSError) as exc:
                self.cache.suspend()
                now = time.monotonic()
                if now - self._last_log >= LOG_INTERVAL_S:
                    self._last_log = now
                    log.warning("token cache: subscription lost (%r); every token is checked in Redis", exc)
                failures += 1
                await nap(min(5.0, 0.05 * 2**failures))
            finally:
                self.cache.suspend()  # also on cancellation: a stopped listener leaves no cache in use
                with suppress(RedisError, OSError):
                    await pubsub.aclose()
                with suppress(RedisError, OSError):
                    await client.aclose()

    async def _clean_start(self) -> None:
        """After a confirmed subscription: every later change arrives here; the ones before it are
        covered by reading the version first and then dropping the cache (entries stored after the
        drop were read after those changes were written)."""
        version = int(await self.redis.get(keys.AUTH_VERSION) or 0)
        self.cache.invalidate()
        self.subscriptions += 1
        await self._ack(version)

    async def _listen(self, pubsub: Any) -> None:
        sent: dict[str, float] = {}  # unanswered pings: payload -> when sent
        sequence = 0
        next_ping = 0.0
        answered = time.monotonic()
        for _ in rounds():
            now = time.monotonic()
            if now >= next_ping:
                if now - answered > LEASE_S:
                    raise RedisError("the subscription stopped answering pings")
                sequence += 1
                sent[str(sequence)] = now
                await pubsub.ping(str(sequence))
                next_ping = now + PING_S
            message = await pubsub.get_message(timeout=max(0.0, next_ping - time.monotonic()))
            if message is None:
                continue
            kind = message.get("type")
            if kind == "message":
                self.cache.invalidate()
                await self._ack(int(message["data"]))
            elif kind == "pong":
                since = sent.pop(str(message["data"]), None)
                if since is not None:
                    answered = time.monotonic()
                    await self._renew(since)
            elif kind == "subscribe":  # resubscribed by the client library: changes may have been missed
                await self._clean_start()

    async def _renew(self, since: float) -> None:
        try:
            await self._heartbeat(keys=[keys.AUTH_REPLICAS], args=[self.replica, int(LEASE_S * 1000)])
        except RedisError:  # not registered: the lease is not extended (writers would not wait for it)
            return
        self.cache.renew(since)

    async def _ack(self, version: int) -> None:
        try:
            await self.redis.publish(keys.AUTH_ACKS, f"{self.replica} {version}")
        except RedisError:  # the writer then waits for this replica's lease to end instead
            pass
