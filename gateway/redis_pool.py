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

from redis.asyncio import BlockingConnectionPool, Connection, Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.config import GatewaySettings
from gateway.errors import GatewayError
from gateway.metrics import GatewayMetrics
from gateway.redis_facade import StrRedis, str_redis

log = logging.getLogger("kswarm.redis")
EXHAUSTION_LOG_INTERVAL_S = 10.0


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

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().get_connection()
        except RedisConnectionError as exc:
            if not isinstance(exc.__cause__, asyncio.TimeoutError):
                raise  # Redis itself is unreachable: not ours to rename
            self._refused()
            raise RedisBusy(self.max_connections, self.timeout or 0) from None

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
