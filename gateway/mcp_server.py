"""The agents' MCP entry point at /mcp (official ``mcp`` SDK, streamable HTTP, bearer tokens).

Every tool resolves the caller from the verified bearer token (``get_access_token``); no tool
takes a sender, author or identity argument. Tool descriptions are kept short on purpose: their
total size is paid in every agent's context window (see docs/mcp.md).

Tools raise the gateway's errors like routes do and catch nothing to translate: ``GatewayMCP`` turns a
``GatewayError`` (and a request model's ``ValidationError``, a 422) escaping any tool, a plugin's too,
into the tool error ``<message> (HTTP <status>)``, the message REST answers for the same refusal.
"""

from __future__ import annotations

from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, InputRequiredResult
from pydantic import ValidationError
from starlette.applications import Starlette

from gateway.context import GatewayContext
from gateway.errors import GatewayError
from gateway.principals import Principal


class PrincipalTokenVerifier:
    """Verifies MCP bearer tokens against the same principal store as the REST API."""

    def __init__(self, ctx: GatewayContext) -> None:
        self.ctx = ctx

    async def verify_token(self, token: str) -> AccessToken | None:
        principal = await self.ctx.principals.verify(token)
        if principal is None:
            return None
        return AccessToken(
            token=token,
            client_id=principal.name,
            scopes=[],
            claims={"principal": principal.model_dump_json()},
        )


def tool_message(exc: GatewayError | ValidationError) -> str:
    """What an agent reads for a refused tool call: the REST message and its HTTP status."""
    if isinstance(exc, ValidationError):
        return f"{exc} (HTTP 422)"
    return f"{exc.message} (HTTP {exc.status})"


class GatewayMCP(MCPServer):
    """The gateway's MCP server: the one place a refusal raised in a tool becomes a tool error."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError as exc:
            # The SDK hides an unexpected exception's text; a refusal is meant to be read.
            cause = exc.__cause__
            if isinstance(cause, GatewayError | ValidationError):
                raise ToolError(f"Error executing tool {name}: {tool_message(cause)}") from cause
            raise


def caller() -> Principal:
    access = get_access_token()
    if access is None or not access.claims:
        raise ToolError("not authenticated")
    return Principal.model_validate_json(access.claims["principal"])


def build_mcp(ctx: GatewayContext) -> GatewayMCP:
    server = GatewayMCP(
        name="kswarm",
        instructions="kswarm gateway: chat, PRs, jobs, tasks and knowledge for the agent swarm.",
        token_verifier=PrincipalTokenVerifier(ctx),
        auth=AuthSettings(
            issuer_url=ctx.settings.url(),  # type: ignore[arg-type]
            resource_server_url=None,
            required_scopes=[],
        ),
        warn_on_duplicate_tools=True,
        log_level="WARNING",
    )
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
        items = await chat.inbox(caller(), wait, limit)
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


def build_mcp_app(ctx: GatewayContext, server: GatewayMCP) -> Starlette:
    return server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,  # any gateway replica, or a restarted one, can answer any call
        json_response=True,
        transport_security=mcp_transport_security(ctx),
        host=ctx.settings.host,
    )
