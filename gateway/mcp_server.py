"""The agents' MCP entry point at /mcp (official ``mcp`` SDK, streamable HTTP, bearer tokens).

Every tool resolves the caller from the verified bearer token (``caller()``); no tool takes a sender,
author or identity argument. Tool descriptions are kept short on purpose: their total size is paid in
every agent's context window (see docs/mcp.md).

Tools raise the gateway's errors like routes do and catch nothing to translate: ``GatewayMCP`` turns a
``GatewayError`` (and a request model's ``ValidationError``, a 422) escaping any tool, a plugin's too,
into the tool error ``<message> (HTTP <status>)``, the message REST answers for the same refusal. A
call of a tool that does not exist is the JSON-RPC error the MCP spec defines (``-32602``).

Authentication is ``McpAuth``, in front of the SDK's transport: it checks the token once (the same
``TokenCheck`` as REST) and hands the SDK the principal, or answers 401 the way the MCP authorization
spec tells clients to read it -- ``WWW-Authenticate: Bearer resource_metadata=...`` pointing at the
RFC 9728 document (``protected_resource_router``), which says that tokens come from the swarm's
operator and that there is no OAuth server to go to.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware, get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, InputRequiredResult
from mcp_types import INVALID_PARAMS
from pydantic import ValidationError
from redis.exceptions import RedisError
from starlette.authentication import AuthCredentials
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.auth import token_from_headers, token_still_valid
from gateway.context import GatewayContext
from gateway.deps import ctx_of
from gateway.errors import GatewayError
from gateway.mcp_inline import InlineHandshakeCalls
from gateway.principals import Principal

log = logging.getLogger("kswarm.mcp")
MCP_PATH = "/mcp"
RESOURCE_METADATA_PATHS = (
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-protected-resource/mcp",
)
TOKENS_FROM = (
    "kswarm bearer tokens are issued by the swarm's operator (kswarm agent add, POST /api/principals); "
    "there is no OAuth server"
)


def tool_message(exc: GatewayError | ValidationError) -> str:
    """What an agent reads for a refused tool call: the REST message and its HTTP status."""
    if isinstance(exc, ValidationError):
        return f"{exc} (HTTP 422)"
    return f"{exc.message} (HTTP {exc.status})"


class GatewayMCP(MCPServer):
    """The gateway's MCP server: the one place a refusal raised in a tool becomes a tool error."""

    tool_names: frozenset[str] | None = None  # every tool is registered before the first call

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        if self.tool_names is None:
            self.tool_names = frozenset(tool.name for tool in await self.list_tools())
        if name not in self.tool_names:
            # The spec's protocol error for an unknown tool, not a tool result an agent could mistake
            # for the tool's own failure.
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {name}")
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError as exc:
            # The SDK hides an unexpected exception's text; a refusal is meant to be read.
            cause = exc.__cause__
            if isinstance(cause, GatewayError | ValidationError):
                raise ToolError(f"Error executing tool {name}: {tool_message(cause)}") from cause
            raise


def caller() -> Principal:
    """The principal of the MCP request being served (``McpAuth`` verified its token)."""
    access = get_access_token()
    principal = access.claims.get("principal") if access is not None and access.claims else None
    if not isinstance(principal, Principal):
        raise ToolError("not authenticated")
    return principal


def base_url(ctx: GatewayContext, headers: Headers) -> str:
    """The URL a client reached us by: its Host when it is one of ours (TCP or the socket), else ours."""
    host = headers.get("host", "")
    if host in mcp_transport_security(ctx).allowed_hosts:
        return f"http://{host}"
    return ctx.settings.url()


def resource_metadata_url(ctx: GatewayContext, headers: Headers) -> str:
    return base_url(ctx, headers) + RESOURCE_METADATA_PATHS[1]


class McpAuth:
    """The /mcp door: one token check, then the SDK's transport with the principal in its auth context.

    No token or a bad one is a 401 whose ``WWW-Authenticate`` names the protected-resource metadata
    (RFC 9728, what MCP clients read to learn how to authenticate) and whose body says why, in the
    OAuth error form (``error``, ``error_description``) MCP clients print; Redis away or the pool busy
    is a 503 with Retry-After, as on every route."""

    def __init__(self, ctx: GatewayContext, app: ASGIApp) -> None:
        self.ctx = ctx
        self.app = AuthContextMiddleware(app)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        token = token_from_headers(headers)
        try:
            principal = await self.ctx.tokens.verify(token) if token else None
        except GatewayError as exc:  # RedisBusy: the pool stayed full
            refusal = {"detail": exc.message, "code": exc.code}
            await JSONResponse(refusal, exc.status, exc.headers)(scope, receive, send)
            return
        except RedisError:
            self.ctx.metrics.redis_unavailable.inc()
            await unavailable()(scope, receive, send)
            return
        if principal is None:
            why = "missing bearer token" if token is None else "invalid or revoked token"
            await self.refuse(headers, why, bad=token is not None)(scope, receive, send)
            return
        access = AccessToken(
            token=token, client_id=principal.name, scopes=[], claims={"principal": principal}
        )
        scope["user"] = AuthenticatedUser(access)
        scope["auth"] = AuthCredentials([])
        await self.app(scope, receive, send)

    def refuse(self, headers: Headers, why: str, bad: bool) -> JSONResponse:
        description = f"{why}: {TOKENS_FROM}"
        challenge = f'Bearer realm="kswarm", resource_metadata="{resource_metadata_url(self.ctx, headers)}"'
        if bad:  # RFC 6750 3.1: an error code only when a token was sent
            challenge += f', error="invalid_token", error_description="{why}"'
        body = {
            "error": "invalid_token",
            "error_description": description,
            "detail": description,
            "code": "unauthorized",
        }
        return JSONResponse(body, 401, {"WWW-Authenticate": challenge})


def unavailable() -> JSONResponse:
    body = {"detail": "Redis is unavailable; retry", "code": "unavailable"}
    return JSONResponse(body, 503, {"Retry-After": "1"})


# RFC 9728 protected-resource metadata for /mcp (public, as the RFC has it).
protected_resource_router = APIRouter()


async def metadata(request: Request) -> dict[str, Any]:
    base = base_url(ctx_of(request), request.headers)
    return {
        "resource": base + MCP_PATH,
        "bearer_methods_supported": ["header"],
        "resource_name": "kswarm gateway",
        # No authorization_servers (optional in RFC 9728): nothing to run an OAuth flow against.
        "kswarm_token_issuer": "operator",
        "kswarm_token_note": TOKENS_FROM,
    }


for _path in RESOURCE_METADATA_PATHS:
    protected_resource_router.add_api_route(
        _path, metadata, methods=["GET"], summary="How to authenticate to /mcp (RFC 9728; public)"
    )


@protected_resource_router.post(
    "/register",
    summary="OAuth client registration: refused, there is no OAuth server (public)",
    response_class=JSONResponse,
)
async def register() -> JSONResponse:
    # An MCP client that finds no authorization server in the metadata falls back to OAuth's default
    # endpoints on our origin, starting with dynamic client registration (RFC 7591): it is refused
    # here in RFC 7591's error form, which such clients print, so a person learns what to do.
    description = f"{TOKENS_FROM}: send one as Authorization: Bearer <token> (this one was refused)"
    body = {
        "error": "invalid_client_metadata",
        "error_description": description,
        "detail": description,
        "code": "bad_request",
    }
    return JSONResponse(body, 400)


def build_mcp(ctx: GatewayContext) -> GatewayMCP:
    server = GatewayMCP(
        name="kswarm",
        instructions="kswarm gateway: chat, PRs, jobs, tasks and knowledge for the agent swarm.",
        warn_on_duplicate_tools=True,
        log_level="WARNING",
    )
    # The SDK wraps every message in an OpenTelemetry span by default; the gateway exports no traces
    # (it has Prometheus metrics), so the span is pure per-call cost. The SDK documents dropping it
    # from the middleware list as the way to opt out; the request-state boundary stays. By its class's
    # name: the class lives in a private module of the SDK (mcp.server._otel), not imported here.
    server.middleware[:] = [m for m in server.middleware if type(m).__name__ != "OpenTelemetryMiddleware"]
    chat = ctx.chat

    @server.tool(name="whoami", description="Your identity: name, kind, git e-mail.")
    async def whoami() -> dict[str, Any]:
        p = caller()
        return {"name": p.name, "kind": p.kind.value, "email": p.email}

    @server.tool(name="channels_list", description="Channels and DMs you can read, with unread counts.")
    async def channels_list() -> list[dict[str, Any]]:
        channels = await chat.list_channels(caller())
        return [c.model_dump(include={"name", "topic", "kind", "members", "unread"}) for c in channels]

    @server.tool(
        name="chat_post",
        description="Post to a channel, or DM an agent with `to`. @name mentions notify; reply_to threads.",
    )
    async def chat_post(
        text: str, channel: str | None = None, to: str | None = None, reply_to: str | None = None
    ) -> dict[str, Any]:
        if (channel is None) == (to is None):
            raise ToolError("give exactly one of channel or to")
        if to is not None:
            msg = await chat.post_dm(caller(), to, text, reply_to)
        else:
            assert channel is not None
            msg = await chat.post(caller(), channel, text, reply_to)
        return msg.model_dump(include={"id", "channel", "mentions", "thread"})

    @server.tool(
        name="chat_read",
        description="Read channel messages after an id (default: after your read cursor, which advances).",
    )
    async def chat_read(channel: str, after: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        messages = await chat.read_new(caller(), channel, after, limit)
        return [m.model_dump(exclude={"kind"} if m.kind == "message" else None) for m in messages]

    @server.tool(
        name="inbox",
        description="Your new DMs, mentions, replies and notices; waits up to `wait` s for one. Advances.",
    )
    async def inbox(wait: float = 0, limit: int = 50) -> list[dict[str, Any]]:
        access = get_access_token()
        valid = token_still_valid(ctx.tokens, access.token if access is not None else "")
        items = await chat.inbox(caller(), wait, limit, valid=valid)
        return [i.model_dump() for i in items]

    return server


def mcp_transport_security(ctx: GatewayContext) -> TransportSecuritySettings:
    """DNS-rebinding protection that still admits our own TCP address and unix-socket clients.

    Unix-socket clients send whatever Host their HTTP library derives from the URL they were
    given; kswarm's clients use ``http://kswarm`` for the socket, so that name is allowed too.
    """
    port = ctx.settings.port
    hosts = [f"127.0.0.1:{port}", f"localhost:{port}", "127.0.0.1", "localhost", "kswarm", "kswarm:80"]
    origins = [f"http://127.0.0.1:{port}", f"http://localhost:{port}", "http://kswarm"]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


def build_mcp_app(ctx: GatewayContext, server: GatewayMCP) -> ASGIApp:
    """The SDK's streamable HTTP handler behind ``McpAuth`` (the app routes it at /mcp, first).

    ``streamable_http_app`` builds the session manager (the app's lifespan runs it) inside a Starlette
    app of its own: one route, at the path the gateway already routed, under a second error and
    exception middleware stack. The gateway serves the manager's ASGI handler directly instead -- the
    same request body limit, DNS-rebinding check and transport, one app stack fewer per call."""
    server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,  # any gateway replica, or a restarted one, can answer any call
        json_response=True,
        transport_security=mcp_transport_security(ctx),
        host=ctx.settings.host,
    )
    # 2025-era requests answered in the request's task (gateway/mcp_inline.py), the rest by the SDK.
    return McpAuth(ctx, InlineHandshakeCalls(server, StreamableHTTPASGIApp(server.session_manager)))
