"""The gateway's one bounded Redis pool per app (``RedisPool``, sized by ``redis_pool_size``).

A request that finds every connection busy waits for one up to ``redis_pool_wait`` seconds, and only
then is refused with ``RedisBusy`` (a 503 with ``Retry-After``), counted in
``kswarm_redis_pool_exhausted_total`` and logged once per interval, not once per request.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any

import hiredis
from redis.asyncio import BlockingConnectionPool, Connection, Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.config import GatewaySettings
from gateway.errors import GatewayError
from gateway.metrics import GatewayMetrics
from gateway.redis_facade import StrRedis, str_redis

log = logging.getLogger("kswarm.redis")
EXHAUSTION_LOG_INTERVAL_S = 10.0
PACKED_AS_IS = frozenset({str, bytes, int, float})  # what hiredis packs as redis-py would


class RedisBusy(GatewayError, RedisConnectionError):
    """Every pooled Redis connection stayed busy for ``redis_pool_wait`` s: a 503 the client may retry.

    Also a redis ``ConnectionError``, so code that treats Redis being unreachable (fail closed, retry
    later) treats a full pool the same way."""

    def __init__(self, size: int, waited: float) -> None:
        super().__init__(
            f"the gateway is busy: all {size} Redis connections stayed in use for {waited:g} s; retry",
            503,
            code="redis_busy",
            headers={"Retry-After": "1"},
        )


class InlineWrites:
    """A connection that writes each command in the calling task, under ``asyncio.timeout``.

    With ``socket_timeout`` set, redis-py 8 sends every command through ``asyncio.wait_for``, which on
    Python 3.11 runs the write as a task of its own: a task and two more loop iterations per command
    (+20-28 µs of CPU each, docs/performance.md "Redis writes without a task"). The same timeout
    holds here, and ends the same way: the connection dropped, redis' ``TimeoutError``. It bounds the
    whole send -- a reconnect's handshake and a health check's PING included, whose reads redis-py
    would otherwise bound one by one."""

    socket_timeout: float | None
    encoder: Any

    def pack_command(self, *args: Any) -> list[bytes]:
        """hiredis packs the whole command (~5 µs for a post's ~50 arguments); redis-py's own packer
        first encodes each argument in Python (~30 µs). Only where the two agree: a one-word command
        name, arguments of exactly str, bytes, int or float (no bool, which redis-py refuses; no
        memoryview, which it sends uncopied), UTF-8; anything else, and any error, goes redis-py's way."""
        name = args[0] if args else None
        if (
            type(name) is str
            and " " not in name
            and set(map(type, args)) <= PACKED_AS_IS
            and self.encoder.encoding == "utf-8"
        ):
            try:
                return [hiredis.pack_command(args)]
            except (TypeError, UnicodeError):
                pass  # redis-py says what is wrong, in its own error
        return super().pack_command(*args)  # type: ignore[misc]

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        timeout = self.socket_timeout
        if not timeout:
            await super().send_packed_command(command, check_health)  # type: ignore[misc]
            return
        self.socket_timeout = None  # redis-py then writes in this task; restored before the reply's read
        try:
            async with asyncio.timeout(timeout):
                await super().send_packed_command(command, check_health)  # type: ignore[misc]
        except TimeoutError:  # redis-py dropped the connection on the cancellation (its BaseException path)
            raise RedisTimeoutError("Timeout writing to socket") from None
        finally:
            if self.socket_timeout is None:  # not meanwhile relaxed by redis-py (maintenance notices)
                self.socket_timeout = timeout


@functools.cache
def inline_writes(connection_class: type) -> type:
    """``connection_class`` with ``InlineWrites`` (one subclass per class, whatever the URL's scheme)."""
    if issubclass(connection_class, InlineWrites):
        return connection_class
    return type(f"InlineWrites{connection_class.__name__}", (InlineWrites, connection_class), {})


class RedisPool(BlockingConnectionPool):
    """A bounded pool that waits for a free connection, then refuses with ``RedisBusy``.

    Each refusal is counted; they are logged once per ``EXHAUSTION_LOG_INTERVAL_S`` with how many there
    were, so a saturated gateway writes a line every few seconds instead of a traceback per request."""

    def __init__(self, *, metrics: GatewayMetrics, **kwargs: Any) -> None:
        kwargs["connection_class"] = inline_writes(kwargs.get("connection_class", Connection))
        super().__init__(**kwargs)
        self.metrics = metrics
        self._refused_since_log = 0
        self._last_log = -EXHAUSTION_LOG_INTERVAL_S
        self._first_unlogged: float | None = None  # the first refusal the next line will count
        # redis-py's own path for every acquire and release where its internals are not the ones known
        # here, or where a credential provider may re-authenticate connections behind the pool's lock.
        self.lean = self.connection_kwargs.get("credential_provider") is None and all(
            hasattr(self, a) for a in ("_lock", "_condition", "_available_connections", "_in_use_connections")
        )

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        if self._uncontended() and self._available_connections and not self._condition_waiters():
            # What redis-py's path does when a connection is free and nobody waits for one before us,
            # without its condition, timeout, lock and observability calls (~30 µs of CPU per command;
            # no recorder is configured here).
            connection = self._available_connections.pop()
            self._in_use_connections.add(connection)
            try:
                await self.ensure_connection(connection)  # connected, nothing unread: as redis-py checks
            except BaseException:
                await self.release(connection)
                raise
            return connection
        try:
            return await super().get_connection()
        except RedisConnectionError as exc:
            if not isinstance(exc.__cause__, asyncio.TimeoutError):
                raise  # Redis itself is unreachable: not ours to rename
            self._refused()
            raise RedisBusy(self.max_connections, self.timeout or 0) from None

    async def release(self, connection: Any) -> None:
        if self._uncontended() and not self._condition_waiters() and not connection.should_reconnect():
            self._in_use_connections.remove(connection)  # nothing awaited: no other task sees it half-done
            self._available_connections.append(connection)
            return
        await super().release(connection)  # notifies a waiter, reconnects, or waits out a handler

    def _uncontended(self) -> bool:
        """No maintenance or re-authentication handler holds the pool (they take its lock), and none can
        be registered: the short path is only for a pool without a credential provider."""
        return self.lean and not self._lock.locked()

    def _condition_waiters(self) -> bool:
        return bool(getattr(self._condition, "_waiters", True))  # unknown: take redis-py's path

    def _refused(self) -> None:
        self.metrics.redis_pool_exhausted.inc()
        self._refused_since_log += 1
        now = time.monotonic()
        if self._first_unlogged is None:
            self._first_unlogged = now
        if now - self._last_log >= EXHAUSTION_LOG_INTERVAL_S:
            log.warning(
                "Redis pool exhausted: %d request(s) refused with 503 in the last %.0f s "
                "(%d connections, waited %g s each; raise KSWARM_GATEWAY_REDIS_POOL_SIZE?)",
                self._refused_since_log,
                now - self._first_unlogged,
                self.max_connections,
                self.timeout or 0,
            )
            self._refused_since_log = 0
            self._first_unlogged = None
            self._last_log = now

    def in_use(self) -> int:
        return len(self._in_use_connections)


def connect_redis(settings: GatewaySettings, metrics: GatewayMetrics) -> StrRedis:
    """The app's Redis client on its bounded pool."""
    pool = RedisPool.from_url(
        settings.redis_url,
        metrics=metrics,
        max_connections=settings.redis_pool_size,
        timeout=settings.redis_pool_wait,
        decode_responses=True,
        health_check_interval=30,
        # Longer than any blocking read a component still makes on the pool (a job worker's take).
        socket_timeout=settings.inbox_max_wait + 15,
    )
    return str_redis(Redis(connection_pool=pool))  # the pool decodes (decode_responses above)
