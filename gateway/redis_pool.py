"""The gateway's one bounded Redis pool per app (``RedisPool``, sized by ``redis_pool_size``).

A request that finds every connection busy waits for one up to ``redis_pool_wait`` seconds, and only
then is refused with ``RedisBusy`` (a 503 with ``Retry-After``), counted in
``kswarm_redis_pool_exhausted_total`` and logged once per interval, not once per request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from redis.exceptions import ConnectionError as RedisConnectionError

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


class RedisPool(BlockingConnectionPool):
    """A bounded pool that waits for a free connection, then refuses with ``RedisBusy``.

    Each refusal is counted; they are logged once per ``EXHAUSTION_LOG_INTERVAL_S`` with how many there
    were, so a saturated gateway writes a line every few seconds instead of a traceback per request."""

    def __init__(self, *, metrics: GatewayMetrics, **kwargs: Any) -> None:
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
