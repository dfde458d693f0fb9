"""Handshake-era (2025) MCP requests answered inline, as the SDK answers 2026-07-28 ones.

For a stateless server with JSON responses, mcp 2.3's session manager answers every 2025-era POST
(Claude Code's era) by building a transport, starting a server task in its task group, opening two
task groups and three stream pairs, and passing the message through three stream hops to a
dispatcher task and back (docs/performance.md, "The MCP SDK's per-request set-up": the patch note
for the SDK). Its own 2026-07-28 path serves one request with ``serve_one`` in the request's task
instead: no tasks, no streams. ``InlineHandshakeCalls`` does that for the 2025 requests whose answer
is one JSON body -- a JSON-RPC request, not ``initialize`` -- with the same kernel (``serve_one``:
the ``ServerRunner`` the SDK's stateless path also runs), the same born-ready connection
(``Connection.from_envelope`` of the header's version), the same checks first, and the same wire:
200 with the response or error the SDK's dispatcher writes (an ``MCPError``'s own error, a
``ValidationError`` as -32602, anything else as ``code: 0`` with its text, logged).

Everything else goes to the SDK unchanged, with the body replayed: ``initialize``, notifications and
responses (202), GET and DELETE, a 2026-07-28 header, and any request a check refuses (so the SDK
writes its own 400/406/415/421/403, byte for byte). Nothing that has a wire is lost: a JSON answer
carries only the response (the SDK's transport drops a request's notifications in this mode too),
and a handshake-era stateless call cannot send the client a request (``NoBackChannelError`` either
way). Measured: docs/performance.md, "Handshake-era MCP calls inline".
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.server.connection import Connection
from mcp.server.mcpserver import MCPServer
from mcp.server.runner import serve_one
from mcp.server.streamable_http import CONTENT_TYPE_JSON, check_accept_headers
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import RequestBodyLimitMiddleware, TransportSecurityMiddleware
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data, progress_token_from_params
from mcp.shared.message import MessageMetadata, ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import (
    DEFAULT_NEGOTIATED_VERSION,
    INTERNAL_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCRequest,
    JSONRPCResponse,
    ProgressToken,
    RequestId,
    jsonrpc_message_adapter,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("kswarm.mcp")
VERSION_HEADER = MCP_PROTOCOL_VERSION_HEADER.lower().encode("latin-1")


@dataclass
class OneExchange:
    """The dispatch context of one inline request: no back channel (as the SDK's stateless JSON
    path: ``can_send_request=False``), and notifications with no wire to go to."""

    transport: TransportContext
    request_id: RequestId
    message_metadata: MessageMetadata
    progress_token: ProgressToken | None = None
    cancel_requested: anyio.Event = field(default_factory=anyio.Event)
    can_send_request: bool = field(default=False, init=False)

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: Any = None
    ) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: Any = None) -> None:
        log.debug("MCP %s dropped: a JSON answer carries only the response", method)

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        return None


def replaying(body: bytes, receive: Receive) -> Receive:
    """``receive`` with the body already read handed out again first (for the SDK's path)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class InlineHandshakeCalls:
    """ASGI: a 2025-era JSON-RPC request answered in this task; anything else to ``fallback`` (the
    SDK's handler). Runs behind ``McpAuth`` and its auth context (``build_mcp_app``); a body it reads
    is held to the SDK's limit (413, as the SDK answers), one it does not is the SDK's to limit."""

    def __init__(self, server: MCPServer, fallback: ASGIApp) -> None:
        self.server = server
        self.fallback = fallback
        # The SDK's body limit, on the requests this reads (the fallback applies its own to the rest).
        self.limited = RequestBodyLimitMiddleware(self.serve, server.session_manager.max_request_body_size)

    def _manager(self) -> StreamableHTTPSessionManager | None:
        """The running session manager, whose lifespan state every request is served with.

        Read from the SDK's private fields (mcp 2.3): should they move in a later SDK, every request
        takes the SDK's own path again, and ``tests/gateway/test_mcp_inline.py`` fails (a session's
        calls reach the SDK's transport) rather than anything being served with the wrong state."""
        manager = self.server.session_manager
        running = getattr(manager, "_task_group", None) is not None and hasattr(manager, "_lifespan_state")
        if not manager.stateless or not manager.json_response or not running:
            return None  # the SDK's own path: it answers as ever, or says it is not running
        return manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        manager = self._manager() if scope["type"] == "http" and scope["method"] == "POST" else None
        version = next((v for k, v in scope["headers"] if k == VERSION_HEADER), None)
        if manager is None or (
            version is not None and version.decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS
        ):
            await self.fallback(scope, receive, send)
            return
        await self.limited(scope, receive, send)

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A handshake-era POST within the body limit: answered here, or by the SDK with its body."""
        request = Request(scope, receive)
        try:
            body = await request.body()
        except ClientDisconnect:  # gone mid-body: nobody to answer
            return
        manager = self._manager()  # None again when the gateway began to stop meanwhile
        inline = await self.inline_request(request, manager, body) if manager is not None else None
        if manager is None or inline is None:
            await self.fallback(scope, replaying(body, receive), send)
            return
        raw = request.headers.get(MCP_PROTOCOL_VERSION_HEADER)
        answer = await self.answer(inline, request, manager, raw or DEFAULT_NEGOTIATED_VERSION)
        status = 200
        try:
            content = answer.model_dump_json(by_alias=True, exclude_unset=True)
        except ValueError:  # a result JSON cannot carry: the JSON-RPC 500 the SDK's transport answers
            log.exception("MCP answer to %r could not be serialized", inline.method)
            status, error = 500, ErrorData(code=INTERNAL_ERROR, message="Error handling POST request")
            failed = JSONRPCError(jsonrpc="2.0", id=None, error=error)
            content = failed.model_dump_json(by_alias=True, exclude_unset=True)
        await Response(content, status, {"Content-Type": CONTENT_TYPE_JSON})(scope, receive, send)

    async def inline_request(
        self, request: Request, manager: StreamableHTTPSessionManager, body: bytes
    ) -> JSONRPCRequest | None:
        """The request to answer here, or None when the SDK's path must answer (or refuse) it."""
        security = TransportSecurityMiddleware(manager.security_settings)
        if await security.validate_request(request, is_post=True) is not None:
            return None
        if not check_accept_headers(request)[0]:
            return None
        content_type = request.headers.get("content-type", "")
        if CONTENT_TYPE_JSON not in (part.strip() for part in content_type.split(";")[0].split(",")):
            return None
        try:
            message = jsonrpc_message_adapter.validate_json(body, by_name=False)
        except (ValueError, ValidationError):
            return None
        if not isinstance(message, JSONRPCRequest) or message.method == "initialize":
            return None
        return message

    async def answer(
        self, message: JSONRPCRequest, request: Request, manager: StreamableHTTPSessionManager, protocol: str
    ) -> JSONRPCResponse | JSONRPCError:
        """The SDK's stateless kernel and its dispatcher's error mapping (code 0 for the unmapped)."""
        exchange = OneExchange(
            transport=TransportContext(kind="streamable-http", can_send_request=False),
            request_id=message.id,
            message_metadata=ServerMessageMetadata(request_context=request, can_send_request=False),
            progress_token=progress_token_from_params(message.params),
        )
        connection = Connection.from_envelope(protocol, None, None)
        try:
            result = await serve_one(
                manager.app,
                exchange,
                message.method,
                message.params,
                connection=connection,
                lifespan_state=manager._lifespan_state,
            )
        except Exception as exc:
            error = handler_exception_to_error_data(exc)
            if error is None:
                log.exception("MCP handler for %r raised", message.method)
                error = ErrorData(code=0, message=str(exc))
            return JSONRPCError(jsonrpc="2.0", id=message.id, error=error)
        return JSONRPCResponse(jsonrpc="2.0", id=message.id, result=result)
