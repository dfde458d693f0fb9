"""Changes to principals and tokens, announced to every gateway replica's token cache (``token_cache``).

The protocol (docs/security.md, "Token cache"), over the one Redis:

- A change (a token revoked, a principal quarantined or enabled, any rewrite of a principal or a token
  key) is written in a MULTI transaction that also runs ``_ANNOUNCE``: it bumps ``ks:auth:version`` and
  publishes the new version on ``ks:auth:changed``. So no change is ever in Redis without its
  announcement, and no announcement goes out before its change.
- Each replica drops its whole cache on a message, then publishes ``"<replica> <version>"`` on
  ``ks:auth:acks``.
- A replica may use its cache only while it holds a *lease*: it pings its own subscription every
  ``PING_S``; for each answer it first writes its lease into ``ks:auth:replicas`` (Redis time +
  ``LEASE_S``), then extends its local lease to the ping's send time + ``LEASE_S``. The registered lease
  therefore always ends after the local one.
- The writer of a change waits, before it returns, until every replica whose registered lease was live
  at the change has acked that version (or a later one), or until the latest of those leases has ended.
  Either way, when the change returns, no replica still grants from an entry cached before it: each has
  dropped its cache or stopped using it. A crashed replica costs a change at most ``LEASE_S`` of waiting.

The writer subscribes to the acks before the transaction runs, on a connection of its own (a change is
rare; it never holds a pooled connection while it waits).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway import keys
from gateway.redis_facade import StrPipeline, StrRedis, str_redis

log = logging.getLogger("kswarm.auth")

LEASE_S = 3.0  # how long a replica may use its cache past the last ping its subscription answered
PING_S = 1.0  # how often a replica pings its subscription (and renews its lease)
CONFIRM_S = 5.0  # how long a subscription may take to be confirmed before it counts as failed

# announce(version key, replicas key, channel) returns {version, ms until the latest live lease ends,
# the replicas whose lease is live}. Leases that ended are removed (a replica re-registers on its next
# ping). TIME before a write is allowed: scripts replicate their effects (Redis >= 5). A Lua function,
# so that a script whose change must be announced (the LLM books' hold) announces it in itself.
ANNOUNCE_LUA = """
local function announce(version_key, replicas_key, channel)
  local version = redis.call('INCR', version_key)
  redis.call('PUBLISH', channel, version)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local leases = redis.call('HGETALL', replicas_key)
  local live, latest = {}, now
  for i = 1, #leases, 2 do
    local ends = tonumber(leases[i + 1])
    if ends and ends > now then
      table.insert(live, leases[i])
      if ends > latest then latest = ends end
    else
      redis.call('HDEL', replicas_key, leases[i])
    end
  end
  return {version, latest - now, live}
end
"""
# KEYS: version, replicas; ARGV: the channel.
_ANNOUNCE = ANNOUNCE_LUA + "return announce(KEYS[1], KEYS[2], ARGV[1])"


def dedicated_client(redis: StrRedis, name: str) -> StrRedis:
    """A client with one connection of its own, built from ``redis``'s settings (it decodes too), that
    never reconnects by itself: a subscription that broke must be seen to break (its messages in
    between are lost), not silently resubscribed."""
    pool = redis.connection_pool
    kwargs: dict[str, Any] = dict(pool.connection_kwargs)
    kwargs["retry"] = Retry(NoBackoff(), 0)
    kwargs["client_name"] = name
    timeout = kwargs.get("socket_timeout")
    if timeout is not None and timeout < CONFIRM_S + PING_S:
        kwargs["socket_timeout"] = CONFIRM_S + PING_S
    own = ConnectionPool(connection_class=pool.connection_class, max_connections=1, **kwargs)
    return str_redis(Redis(connection_pool=own))


def parse_ack(data: str) -> tuple[str, int] | None:
    """An ack's replica and version, or None for a message that is not one."""
    replica, _, version = data.partition(" ")
    return (replica, int(version)) if replica and version.isdigit() else None


async def subscribed(pubsub: Any, channel: str) -> None:
    """Subscribe and wait for Redis's confirmation: from then on every message on ``channel`` arrives."""
    await pubsub.subscribe(channel)
    confirm = await pubsub.get_message(timeout=CONFIRM_S)
    if confirm is None or confirm.get("type") != "subscribe":
        raise RedisConnectionError(f"no confirmation of the subscription to {channel}")


class Acks:
    """The replicas' acks of an announcement, subscribed to before it is made (``acks_of``)."""

    def __init__(self, pubsub: Any) -> None:
        self.pubsub = pubsub

    async def wait(self, announced: list[Any]) -> None:
        """Until every replica live at the announcement (``announce``'s reply) acked it, or their leases
        ended."""
        version, wait_ms, live = announced
        await _wait_for_acks(self.pubsub, int(version), set(live), int(wait_ms) / 1000)


@asynccontextmanager
async def acks_of(redis: StrRedis) -> AsyncIterator[Acks]:
    """Subscribed to the acks, on a connection of its own, for an announcement made inside: a RedisError
    before anything is yielded when Redis cannot be reached."""
    listener = dedicated_client(redis, "kswarm-auth-change")
    pubsub = listener.pubsub()
    try:
        await subscribed(pubsub, keys.AUTH_ACKS)
        yield Acks(pubsub)
    finally:
        await pubsub.aclose()
        await listener.aclose()


@asynccontextmanager
async def announced_change(redis: StrRedis) -> AsyncIterator[StrPipeline]:
    """A transaction for a change to principals or tokens: queue its commands on the pipeline this
    yields; on leaving, the transaction runs with the announcement, and this waits for the replicas'
    acks (see the module). Raises a RedisError before anything is written if Redis cannot be reached."""
    async with acks_of(redis) as acks:
        async with redis.pipeline(transaction=True) as pipe:
            yield pipe
            pipe.eval(_ANNOUNCE, 2, keys.AUTH_VERSION, keys.AUTH_REPLICAS, keys.AUTH_CHANGED)
            replies = await pipe.execute()
        await acks.wait(replies[-1])  # the pooled connection is back: waiting holds none


async def _wait_for_acks(pubsub: Any, version: int, pending: set[str], wait_s: float) -> None:
    deadline = time.monotonic() + wait_s  # measured from after the script ran: never shorter than a lease
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            # Safe: each of these replicas' leases has ended, so none grants from its cache now.
            log.warning("auth change %d: no ack from %s before their leases ended", version, sorted(pending))
            return
        try:
            message = await pubsub.get_message(timeout=left)
        except (RedisConnectionError, OSError):
            # The acks are lost, the change is written and announced: the leases bound the wait.
            await asyncio.sleep(max(0.0, deadline - time.monotonic()))
            return
        if message is None or message.get("type") != "message":
            continue
        ack = parse_ack(str(message["data"]))
        if ack is not None and ack[1] >= version:
            pending.discard(ack[0])
