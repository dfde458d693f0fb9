"""The gateway app factory: one FastAPI app with REST, SSE, MCP and metrics, state in Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from redis.asyncio import Redis

from gateway.api import build_api_router
from gateway.auth import require_operator
from gateway.config import GatewaySettings
from gateway.context import GatewayContext
from gateway.events import build_events_router
from gateway.mcp_server import build_mcp, build_mcp_app
from gateway.models import BadMessageId
from gateway.principals import Principal

# A plugin adds routes, MCP tools and background tasks for one component (forge, jobs, ...).
# It is called with the app, the context and the MCP server before start-up and may return an
# async context manager factory that runs for the app's lifetime.
GatewayPlugin = Callable[[FastAPI, GatewayContext, Any], Any]


def create_app(
    settings: GatewaySettings,
    redis: Redis | None = None,
    plugins: list[GatewayPlugin] | None = None,
) -> FastAPI:
    ctx = GatewayContext.build(settings, redis)
    mcp = build_mcp(ctx)
    lifespans: list[Any] = []

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await ctx.redis.ping()
        await ctx.chat.ensure_default_channels()
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(mcp.session_manager.run())
            for factory in lifespans:
                await stack.enter_async_context(factory())
            yield
        await ctx.redis.aclose()

    app = FastAPI(
        title="kswarm gateway",
        version="0.1.0",
        description="The agents' only door: chat, MCP, REST, events. All but /healthz need a bearer token.",
        lifespan=lifespan,
    )
    app.state.ctx = ctx
    app.state.mcp = mcp

    @app.get("/healthz", summary="Liveness (no auth)")
    async def healthz() -> dict[str, Any]:
        try:
            redis_ok = bool(await ctx.redis.ping())
        except Exception:  # a health check reports, it does not raise
            redis_ok = False
        return {"ok": redis_ok, "redis": redis_ok}

    @app.get("/metrics", summary="Prometheus metrics (operators)")
    async def metrics(_: Annotated[Principal, Depends(require_operator)]) -> Response:
        return Response(await ctx.metrics.render(), media_type="text/plain; version=0.0.4")

    app.include_router(build_api_router())
    app.include_router(build_events_router())
    for plugin in plugins or []:
        extra = plugin(app, ctx, mcp)
        if extra is not None:
            lifespans.append(extra)

    @app.exception_handler(BadMessageId)
    async def bad_message_id(_: Request, exc: BadMessageId) -> JSONResponse:
        # An id from a client that is not a stream id never reaches Redis (which would make it a 500).
        return JSONResponse(status_code=400, content={"detail": str(exc)})

    @app.exception_handler(ValueError)
    async def value_error(_: Request, exc: ValueError) -> JSONResponse:
        return JSONResponse(status_code=400, content={"detail": str(exc)})

    # The MCP app is mounted last, at the root, so that it answers /mcp and nothing shadows our routes.
    app.mount("/", build_mcp_app(ctx, mcp))
    return app
