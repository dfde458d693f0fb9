"""The gateway's dependencies, built once per app and passed down (no module globals).

Redis is reached through one bounded pool per app (``gateway.redis_pool``). Nothing that waits (inbox
waits, SSE) holds a pooled connection: the event hub (``gateway.events``) has its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi import Request
from fastapi.responses import Response

from gateway.auth import TokenCheck
from gateway.chat import ChatService
from gateway.config import GatewaySettings
from gateway.errors import GatewayError
from gateway.events import EventHub
from gateway.metrics import GatewayMetrics
from gateway.principals import PrincipalStore
from gateway.redis_facade import StrRedis
from gateway.redis_pool import RedisPool, connect_redis
from gateway.services import ServiceRegistry
from gateway.token_cache import CacheListener, TokenCache
from gateway.waits_budget import WaitBudget

# A component's own rendering of errors under its path prefix (the UI's HTML pages); None: the default.
ErrorPage = Callable[[Request, GatewayError], Response | None]


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
    token_listener: CacheListener  # keeps ``tokens``' cache safe to use (its lifespan: the app's)
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
        token_cache = TokenCache()
        checks = {source: metrics.token_checks.labels(source=source) for source in ("cache", "redis")}
        ctx = cls(
            settings=settings,
            redis=redis,
            principals=principals,
            chat=chat,
            metrics=metrics,
            hub=hub,
            tokens=TokenCheck(redis, token_cache, lambda source: checks[source].inc()),
            token_listener=CacheListener(redis, token_cache),
            waits=waits,
        )
        metrics.refreshers.append(ctx._refresh_gauges)
        return ctx

    async def _refresh_gauges(self) -> None:
        pool = self.redis.connection_pool
        if isinstance(pool, RedisPool):
            self.metrics.redis_pool_in_use.set(pool.in_use())
        self.metrics.waiters.set(self.hub.waiters())
