"""Server-sent events at /api/events: the global event stream, filtered to what the caller may see.

Each event's SSE id is its Redis stream id, so a client that reconnects with ``Last-Event-ID``
resumes exactly after the last event it received: nothing lost, nothing repeated.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from gateway import keys
from gateway.auth import current_principal
from gateway.context import GatewayContext
from gateway.models import MESSAGE_ID_SCHEMA, optional_message_id
from gateway.principals import Principal

BLOCK_MS = 5000


async def tail_events(
    ctx: GatewayContext, principal: Principal, last_id: str, request: Request, channel: str | None = None
) -> AsyncIterator[ServerSentEvent]:
    ctx.metrics.sse_clients.inc()
    try:
        while not await request.is_disconnected():
            reply = await ctx.redis.xread({keys.EVENTS: last_id}, count=200, block=BLOCK_MS)
            for entry_id, fields in reply[0][1] if reply else []:
                last_id = entry_id
                if not ctx.chat.visible_event(principal, fields):
                    continue
                if channel is not None and fields.get("channel") != channel:
                    continue
                yield ServerSentEvent(
                    data=json.dumps(fields), event=fields.get("type", "message"), id=entry_id
                )
    finally:
        ctx.metrics.sse_clients.dec()


def resume_id(request: Request, last_event_id: str | None) -> str | None:
    """Where a (re)connecting SSE client resumes: ``Last-Event-ID`` (the header wins), checked, or None.

    A BadMessageId names the header or the parameter it came in; the app answers it with a 400.
    """
    header = request.headers.get("last-event-id")
    if header is not None:
        return optional_message_id(header, "Last-Event-ID")
    return optional_message_id(last_event_id or None, "last_event_id")


def build_events_router() -> APIRouter:
    router = APIRouter()

    @router.get("/api/events", summary="Live events (SSE); resumes after Last-Event-ID")
    async def events(
        request: Request,
        principal: Annotated[Principal, Depends(current_principal)],
        last_event_id: Annotated[
            str | None,
            Query(description="Resume after this id (or the header)", json_schema_extra=MESSAGE_ID_SCHEMA),
        ] = None,
        channel: Annotated[str | None, Query(description="Only events of this channel")] = None,
    ) -> EventSourceResponse:
        ctx: GatewayContext = request.app.state.ctx
        start = resume_id(request, last_event_id)
        if start is None:
            # Resolve "now" to a concrete id up front, so nothing posted after connecting is missed.
            latest = await ctx.redis.xrevrange(keys.EVENTS, "+", "-", 1)
            start = latest[0][0] if latest else "0-0"
        return EventSourceResponse(tail_events(ctx, principal, start, request, channel), ping=15)

    return router
