"""The gateway's dependencies, built once per app and passed down (no module globals)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi import Request
from fastapi.responses import Response
from redis.asyncio import Redis

from gateway.chat import ChatService
from gateway.config import GatewaySettings
from gateway.errors import GatewayError
from gateway.metrics import GatewayMetrics
from gateway.principals import PrincipalStore
from gateway.services import ServiceRegistry

# A component's own rendering of errors under its path prefix (the UI's HTML pages); None: the default.
ErrorPage = Callable[[Request, GatewayError], Response | None]


@dataclass
class GatewayContext:
    """Everything a route or MCP tool needs; stored on ``app.state.ctx``."""

    settings: GatewaySettings
    redis: Redis
    principals: PrincipalStore
    chat: ChatService
    metrics: GatewayMetrics
    services: ServiceRegistry = field(default_factory=ServiceRegistry)  # what plugins share, typed
    error_pages: dict[str, ErrorPage] = field(default_factory=dict)  # path prefix -> renderer

    @classmethod
    def build(cls, settings: GatewaySettings, redis: Redis | None = None) -> GatewayContext:
        # redis-py's default 5 s socket timeout would cut blocking reads (inbox waits) short.
        redis = redis or Redis.from_url(
            settings.redis_url,
            decode_responses=True,
            health_check_interval=30,
            socket_timeout=settings.inbox_max_wait + 15,
        )
        principals = PrincipalStore(redis, settings.swarm)
        metrics = GatewayMetrics()
        chat = ChatService(redis, principals, settings, metrics)
        return cls(settings=settings, redis=redis, principals=principals, chat=chat, metrics=metrics)
