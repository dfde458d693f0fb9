"""The gateway app factory: one FastAPI app with REST, SSE, MCP and metrics, state in Redis."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import Response
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway import api, events, health
from gateway.config import GatewaySettings
from gateway.context import GatewayContext
from gateway.deps import OperatorOnly
from gateway.error_shapes import declare_error_shapes, install_error_handler
from gateway.errors import PluginError
from gateway.input_text import ControlCharGuard
from gateway.mcp_server import MCP_PATH, build_mcp, build_mcp_app, protected_resource_router
from gateway.plugin import (
    Contribution,
    Door,
    Loop,
    Plugin,
    background,
    bounded_stop,
    contribution_of,
    order_plugins,
)
from gateway.redis_facade import StrRedis


class GatewayApp(FastAPI):
    """The FastAPI app, with its doors (``gateway.plugin.Door``: ``/mcp``, every agent's, and the LLM
    proxy's) dispatched before the app's middleware stack and router. The stack's layers serve REST
    routes: the 500 page (uvicorn answers the same), exception handlers for errors a door answers
    itself, FastAPI's telemetry and body limit (off; the doors limit their own bodies), and the
    control-character guard, which ``/mcp``'s door keeps and ``/v1/`` is exempt from; what escapes a
    door is answered by the app's exception handlers all the same (``_through``). Any other path or
    method to the router, as before (where ``/mcp/`` is still redirected to ``/mcp``)."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.doors: dict[str, Door] = {}  # path -> its door

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (door := self.doors.get(scope["path"])) is not None:
            if door.methods is None or scope["method"] in door.methods:
                scope["app"] = self
                await self._through(door.app, scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    async def _through(self, door: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        """``door``, with an exception that escapes it before its answer began answered as the stack
        would: by the app's handler for its type (Redis away: a 503 in the path's shape), and one only
        the catch-all handler takes is answered, then raised for the server's log, as Starlette's
        outermost middleware does."""
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await door(scope, receive, tracked)
        except Exception as exc:
            kind = next((k for k in type(exc).__mro__ if k in self.exception_handlers), None)
            if kind is None or started:
                raise
            answer = self.exception_handlers[kind](Request(scope, receive), exc)
            response = await answer if inspect.isawaitable(answer) else answer
            await response(scope, receive, send)
            if kind is Exception:
                raise


def create_app(
    settings: GatewaySettings,
    redis: StrRedis | None = None,
    plugins: Sequence[Plugin[Any]] = (),
) -> FastAPI:
    """The app with ``plugins`` (see ``gateway.plugins``), each installed after the ones it depends on.

    Raises PluginError, before anything is built, when the plugins do not fit together."""
    ordered = order_plugins(plugins)
    ctx = GatewayContext.build(settings, redis)
    mcp = build_mcp(ctx)
    contributions: list[Contribution] = []
    hot_routers: list[APIRouter] = []

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await ctx.redis.ping()
        await ctx.chat.ensure_default_channels()
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(ctx.hub.running())  # before anyone can wait on it
            await stack.enter_async_context(ctx.token_listener.running())  # the token cache's lease
            await stack.enter_async_context(mcp.session_manager.run())
            loops: dict[str, Loop] = {}
            for plugin, contribution in zip(ordered, contributions, strict=True):
                if contribution.lifespan is not None:
                    await stack.enter_async_context(bounded_stop(plugin.name, contribution.lifespan()))
                loops.update(contribution.background)
            # Every loop starts once every lifespan's set-up is done, and is cancelled before any ends.
            await stack.enter_async_context(background({name: loop() for name, loop in loops.items()}))
            yield
        await ctx.redis.aclose()

    app = GatewayApp(
        title="kswarm gateway",
        version="0.1.0",
        description="The agents' only door: chat, MCP, REST, events. All but /healthz need a bearer token.",
        lifespan=lifespan,
    )
    app.state.ctx = ctx
    app.state.mcp = mcp

    @app.get("/metrics", summary="Prometheus metrics (operators)")
    async def metrics(_: OperatorOnly) -> Response:
        return Response(await ctx.metrics.render(), media_type="text/plain; version=0.0.4")

    for router in (health.router, events.router, protected_resource_router):
        add_routes(app, router)
    for plugin in ordered:
        contribution = contribution_of(plugin, ctx)
        for router in contribution.routers:
            add_routes(app, router)
        hot_routers.extend(contribution.hot_routers)
        app.router.routes.extend(contribution.mounts)
        for door in contribution.doors:
            if door.path in app.doors or door.path == MCP_PATH:
                raise PluginError(f"plugin {plugin.name!r}: a door at {door.path} exists already")
            app.doors[door.path] = door
        for tool in contribution.tools:
            mcp.add_tool(tool.fn, name=tool.name, description=tool.description)
        for name in contribution.background:  # a task name is how a stuck loop is named in the log
            if any(name in earlier.background for earlier in contributions):
                raise PluginError(f"plugin {plugin.name!r}: a background loop {name!r} exists already")
        contributions.append(contribution)
    install_error_handler(app)
    app.add_middleware(ControlCharGuard)

    generate_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        # Post-processed once, when first asked: every plugin's routes are registered by then.
        if app.openapi_schema is None:
            app.openapi_schema = declare_error_shapes(generate_openapi())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    # The router tries the routes in order: the calls agents make every turn come first. /mcp is the
    # very first; none of these shadows another route (no other route has their paths).
    matched_first(app, [*hot_routers, api.router])
    mcp_app = build_mcp_app(ctx, mcp)
    app.router.routes.insert(0, Route(MCP_PATH, mcp_app))
    app.doors[MCP_PATH] = Door(MCP_PATH, ControlCharGuard(mcp_app))
    return app


def add_routes(app: FastAPI, router: APIRouter) -> None:
    """``router``'s routes, as they are, into the app's own list.

    ``include_router`` (FastAPI 0.165) adds one lazy entry per router instead, which serving a request
    walks twice -- a version check over every route of every router before it, a match, then the same
    match again to serve the one found: ~1/5 of the framework's calls per request. Our routers carry
    their prefix, tags and dependencies on each route already and are included with nothing of their
    own (no prefix, dependencies, responses, overrides or lifespan at include time), so each route
    serves as an included one would, and the OpenAPI document is the same
    (``tests/gateway/test_plugins.py``)."""
    app.router.routes.extend(router.routes)


def matched_first(app: FastAPI, routers: Sequence[APIRouter]) -> None:
    """Add ``routers``' routes ahead of every route already there, in their order."""
    before = len(app.router.routes)
    for router in routers:
        add_routes(app, router)
    added = app.router.routes[before:]
    del app.router.routes[before:]
    app.router.routes[:0] = added
