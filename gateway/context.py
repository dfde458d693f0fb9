"""The gateway's dependencies, built once per app and passed down (no module globals).

Redis is reached through one bounded pool per app (``RedisPool``, sized by ``redis_pool_size``): a
request that finds every connection busy waits for one up to ``redis_pool_wait`` seconds, and only
then is refused with ``RedisBusy`` (a 503 with ``Retry-After``), counted in
``kswarm_redis_pool_exhausted_total`` and logged once per interval, not once per request. Nothing that
waits (inbox waits, SSE) holds a pooled connection: the event hub (``gateway.events``) has its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from redis.asyncio import BlockingConnectionPool, Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.auth import TokenCheck
from gateway.chat import ChatService
from gateway.config import GatewaySettings
from gateway.errors import GatewayError
from gateway.events import EventHub
from gateway.metrics import GatewayMetrics
from gateway.principals import PrincipalStore
from gateway.redis_facade import StrRedis, str_redis
from gateway.services import ServiceRegistry
from gateway.waits_budget import WaitBudget

# A component's own rendering of errors under its path prefix (the UI's HTML pages); None: the default.
ErrorPage = Callable[[Request, GatewayError], Response | None]
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


@dataclass
class GatewayContext:
    """Everything a route or MCP tool needs; stored on ``app.state.ctx``."""

    settings: GatewaySettings
    redis: StrRedis
    principals: PrincipalStore
    chat: ChatService
    metrics: GatewayMetrics
    hub: EventHub  # the one reader every waiter shares (its lifespan: the app's)
    tokens: TokenCheck  # what every request's token is checked with
    waits: WaitBudget  # the open waits each agent holds
    services: ServiceRegistry = field(default_factory=ServiceRegistry)  # what plugins share, typed
    error_pages: dict[str, ErrorPage] = field(default_factory=dict)  # path prefix -> renderer

    @classmethod
    def build(cls, settings: GatewaySettings, redis: StrRedis | None = None) -> GatewayContext:
        metrics = GatewayMetrics()
        redis = redis or connect_redis(settings, metrics)
        principals = PrincipalStore(redis, settings.swarm)
        hub = EventHub(redis, metrics)
        waits = WaitBudget(settings.max_waits_per_agent)
        chat = ChatService(redis, principals, settings, metrics, hub, waits)
        ctx = cls(
            settings=settings,
            redis=redis,
            principals=principals,
            chat=chat,
            metrics=metrics,
            hub=hub,
            tokens=TokenCheck(redis),
            waits=waits,
        )
        metrics.refreshers.append(ctx._refresh_gauges)
        return ctx

    async def _refresh_gauges(self) -> None:
        pool = self.redis.connection_pool
        if isinstance(pool, RedisPool):
            self.metrics.redis_pool_in_use.set(pool.in_use())
        self.metrics.waiters.set(self.hub.waiters())
