"""The gateway app factory: one FastAPI app with REST, SSE, MCP and metrics, state in Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.openapi.utils import validation_error_definition, validation_error_response_definition
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from redis.asyncio import Redis

from gateway.api import build_api_router
from gateway.auth import require_operator
from gateway.config import GatewaySettings
from gateway.context import GatewayContext
from gateway.events import build_events_router
from gateway.mcp_server import build_mcp, build_mcp_app
from gateway.models import AnthropicError, BadMessageId, GiteaError, Refusal
from gateway.principals import Principal

# A plugin adds routes, MCP tools and background tasks for one component (forge, jobs, ...).
# It is called with the app, the context and the MCP server before start-up and may return an
# async context manager factory that runs for the app's lifetime.
GatewayPlugin = Callable[[FastAPI, GatewayContext, Any], Any]

# Routes that speak another API's protocol keep its error shape, declared beside ours: the embedded
# forge's Gitea-compatible routes, and the LLM proxy's Anthropic-compatible ones.
PROTOCOL_ERRORS: tuple[tuple[str, type[BaseModel]], ...] = (
    ("/api/v1/", GiteaError),
    ("/v1/", AnthropicError),
)
HTTP_METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def declare_error_shapes(schema: dict[str, Any]) -> dict[str, Any]:
    """Make ``/openapi.json`` true about errors, for every operation (a plugin's too, unedited).

    FastAPI declares only a 422 of its validation shape (``detail``: a list), while routes refuse with
    ``HTTPException(status, "why")`` (``detail``: a string) -- a 422 among them. So every operation
    gets a ``default`` response, ``Refusal`` (``{"detail": str}``), and its 422 becomes "either shape".
    Under a ``PROTOCOL_ERRORS`` prefix that protocol's shape is declared beside them (such routes answer
    both: their own errors in the protocol's shape, the shared auth's in ours). HTML pages declare HTML
    error pages too.
    """
    schemas = schema.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault("ValidationError", validation_error_definition)
    schemas.setdefault("HTTPValidationError", validation_error_response_definition)
    for model in (Refusal, *(m for _, m in PROTOCOL_ERRORS)):
        definition = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(definition.pop("$defs", {}))
        schemas[model.__name__] = definition
    for path, item in schema.get("paths", {}).items():
        protocol = [_ref(m.__name__) for prefix, m in PROTOCOL_ERRORS if path.startswith(prefix)]
        refusals = [_ref("Refusal"), *protocol]
        refusal = refusals[0] if len(refusals) == 1 else {"anyOf": refusals}
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            responses = operation.setdefault("responses", {})
            content: dict[str, Any] = {"application/json": {"schema": refusal}}
            if any("text/html" in r.get("content", {}) for r in responses.values()):
                content["text/html"] = {"schema": {"type": "string"}}  # a browser's error page
            if "422" in responses:
                responses["422"] = {
                    "description": "Request validation (a list) or a refusal of the request's content",
                    "content": {
                        "application/json": {"schema": {"anyOf": [_ref("HTTPValidationError"), *refusals]}}
                    },
                }
            responses.setdefault(
                "default",
                {"description": "Refused (4xx) or failed (5xx): detail says why", "content": content},
            )
    return schema


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

    generate_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        # Post-processed once, when first asked: every plugin's routes are registered by then.
        if app.openapi_schema is None:
            app.openapi_schema = declare_error_shapes(generate_openapi())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    # The MCP app is mounted last, at the root, so that it answers /mcp and nothing shadows our routes.
    app.mount("/", build_mcp_app(ctx, mcp))
    return app
