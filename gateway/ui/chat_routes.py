"""The Chat panel: channels and DMs, live over SSE, threads, scroll-back, search, the operator composer."""

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse
from redis.exceptions import TimeoutError as RedisTimeoutError
from sse_starlette import EventSourceResponse, ServerSentEvent

from gateway import keys
from gateway.chat import dm_channel, dm_members, message_from_fields
from gateway.errors import GatewayError, NotFound
from gateway.events import resume_id
from gateway.models import (
    FIRST_ID,
    MAX_ID_PART,
    MESSAGE_ID_SCHEMA,
    Message,
    optional_message_id,
    parse_message_id,
)
from gateway.ui.auth import UiUser
from gateway.ui.internal import segment
from gateway.ui.service import UiService

ALL = "*"  # the pseudo-channel "all activity": every channel and DM, interleaved
PAGE = 50
# Below redis-py's default socket_timeout (5 s since redis-py 8), so a quiet stream never times out.
BLOCK_MS = 2000


def predecessor(entry_id: str) -> str:
    """The id just before ``entry_id`` (a canonical id), so that an exclusive ``after`` includes it.

    ``0-0`` has none; it is its own answer, as no message is ever ``0-0``.
    """
    ms, seq = (int(x) for x in entry_id.split("-"))
    if seq:
        return f"{ms}-{seq - 1}"
    return f"{ms - 1}-{MAX_ID_PART}" if ms else FIRST_ID


class ChatPages:
    """Helpers around one request's internal API."""

    def __init__(self, ui: UiService, user: UiUser) -> None:
        self.ui = ui
        self.user = user
        self.api = ui.api(user)

    async def messages(self, channel: str, **params: Any) -> list[Message]:
        reply = await self.api.get(f"/api/channels/{segment(channel)}/messages", limit=PAGE, **params)
        if not reply.ok:
            raise GatewayError(reply.detail, reply.status)
        return [Message.model_validate(m) for m in reply.json()["messages"]]

    async def feed(self, before: str | None = None) -> list[tuple[str, Message]]:
        """The latest messages of every channel (event id, message), oldest first."""
        ctx = self.ui.ctx
        found: list[tuple[str, Message]] = []
        if before == FIRST_ID:
            return []  # nothing is older (and Redis refuses an exclusive bound there)
        upper = f"({before}" if before else "+"
        while len(found) < PAGE:
            batch = await ctx.redis.xrevrange(keys.EVENTS, upper, "-", 500)
            for event_id, fields in batch:
                if fields.get("type") == "message" and ctx.chat.visible_event(self.user.principal, fields):
                    found.append((event_id, message_from_fields(fields["id"], fields)))
            if len(batch) < 500:
                break
            upper = f"({batch[-1][0]}"
        return list(reversed(found[:PAGE]))

    async def reply_counts(self, channel: str | None, messages: list[Message]) -> dict[str, int]:
        roots = [m for m in messages if not m.thread]
        async with self.ui.ctx.redis.pipeline(transaction=False) as pipe:
            for m in roots:
                pipe.llen(keys.thread_index(channel or m.channel, m.id))
            counts = await pipe.execute()
        return {m.id: n for m, n in zip(roots, counts, strict=True) if n}

    def render_messages(
        self, messages: list[Message], replies: dict[str, int], events: list[str] | None = None
    ) -> str:
        return self.ui.renderer.render(
            "_messages.html",
            messages=messages,
            replies=replies,
            events=events or [""] * len(messages),
            me=self.user.principal.name,
        )

    def composer_target(self, channel: str) -> tuple[str | None, str]:
        """Where the composer posts for ``channel``, or None and why it cannot."""
        if channel == ALL:
            return None, "pick a channel or DM to write in"
        peers = dm_members(channel)
        if peers is None:
            return f"/ui/api/channels/{segment(channel)}/messages", f"message #{channel}"
        me = self.user.principal.name
        if me not in peers:
            return None, f"a DM between {peers[0]} and {peers[1]}: read-only (DM one of them instead)"
        peer = peers[0] if peers[1] == me else peers[1]
        return f"/ui/api/dms/{segment(peer)}/messages", f"message {peer} directly"


def build_chat_router(ui: UiService) -> APIRouter:
    router = APIRouter(prefix="/ui")
    User = Annotated[UiUser, Depends(ui.auth.user)]

    @router.get("/chat", response_class=HTMLResponse, summary="Chat: channels, DMs, live")
    async def chat(
        request: Request,
        user: User,
        c: Annotated[str, Query(description="Channel, dm:<a>:<b>, or * for all")] = ALL,
        dm: Annotated[str | None, Query(description="Open a DM with this principal")] = None,
        at: Annotated[
            str | None,
            Query(description="Show the history around this message id", json_schema_extra=MESSAGE_ID_SCHEMA),
        ] = None,
    ) -> HTMLResponse:
        pages = ChatPages(ui, user)
        at = optional_message_id(at, "at")
        if dm:
            c = dm_channel(user.principal.name, dm)
        channels_reply = await pages.api.get("/api/channels")
        channels = channels_reply.json() if channels_reply.ok else []
        known = {ch["name"] for ch in channels}
        principals = await pages.api.get("/api/principals")
        names = sorted(p["name"] for p in (principals.json() if principals.ok else []))
        if dm and dm not in names:
            raise NotFound(f"unknown principal {dm!r}")
        events: list[str] | None = None
        error = ""
        if c == ALL:
            pairs = await pages.feed()
            events, messages = [e for e, _ in pairs], [m for _, m in pairs]
        elif c not in known:
            messages = []
            error = "" if dm else f"no channel {c!r}"
        elif at:
            messages = await pages.messages(c, before=at) + await pages.messages(c, after=predecessor(at))
        else:
            messages = await pages.messages(c)
        post_url, placeholder = pages.composer_target(c)
        if error:
            post_url, placeholder = None, error
        return ui.page(
            "chat.html",
            request,
            user,
            "chat",
            channel=c,
            channels=[ch for ch in channels if ch["kind"] == "channel"],
            dms=[ch for ch in channels if ch["kind"] == "dm"],
            principals=names,
            messages_html=pages.render_messages(messages, await pages.reply_counts(None, messages), events),
            more=len(messages) >= PAGE or bool(at),
            at=at or "",
            post_url=post_url,
            placeholder=placeholder,
            error=error,
            topic=next((ch.get("topic", "") for ch in channels if ch["name"] == c), ""),
        )

    @router.get("/chat/history", response_class=HTMLResponse, summary="Older messages (a fragment)")
    async def history(
        user: User,
        c: str,
        before: Annotated[
            str, Query(description="Message (or, for *, event) id", json_schema_extra=MESSAGE_ID_SCHEMA)
        ],
    ) -> HTMLResponse:
        pages = ChatPages(ui, user)
        before = parse_message_id(before, "before")
        if c == ALL:
            pairs = await pages.feed(before)
            events, messages = [e for e, _ in pairs], [m for _, m in pairs]
        else:
            events, messages = None, await pages.messages(c, before=before)
        html = pages.render_messages(messages, await pages.reply_counts(None, messages), events)
        return HTMLResponse(html, headers={"X-More": "1" if len(messages) >= PAGE else "0"})

    @router.get("/chat/thread", response_class=HTMLResponse, summary="A thread (a fragment)")
    async def thread(
        user: User, c: str, root: Annotated[str, Query(json_schema_extra=MESSAGE_ID_SCHEMA)]
    ) -> HTMLResponse:
        pages = ChatPages(ui, user)
        root = parse_message_id(root, "root")
        reply = await pages.api.get(f"/api/channels/{segment(c)}/threads/{root}")
        if not reply.ok:
            raise GatewayError(reply.detail, reply.status)
        messages = [Message.model_validate(m) for m in reply.json()["messages"]]
        post_url, placeholder = pages.composer_target(c)
        return HTMLResponse(
            ui.renderer.render(
                "_thread.html",
                channel=c,
                root=root,
                messages_html=pages.render_messages(messages, {}),
                post_url=post_url,
                placeholder=placeholder,
            )
        )

    @router.get("/chat/search", response_class=HTMLResponse, summary="Search messages")
    async def search(
        request: Request, user: User, q: Annotated[str, Query(max_length=200)] = ""
    ) -> HTMLResponse:
        pages = ChatPages(ui, user)
        messages: list[Message] = []
        error = ""
        if q.strip():
            reply = await pages.api.get("/api/search", q=q, limit=100)
            if reply.ok:
                messages = [Message.model_validate(m) for m in reply.json()["messages"]]
            else:
                error = reply.detail
        return ui.page(
            "search.html",
            request,
            user,
            "chat",
            q=q,
            error=error,
            messages_html=pages.render_messages(list(reversed(messages)), {}),
            count=len(messages),
        )

    @router.get("/events", summary="Live events (SSE) for the UI session, with rendered messages")
    async def events(
        request: Request,
        user: User,
        channel: Annotated[str | None, Query(description="Only events of this channel")] = None,
        last_event_id: Annotated[
            str | None, Query(description="Resume after this id", json_schema_extra=MESSAGE_ID_SCHEMA)
        ] = None,
    ) -> EventSourceResponse:
        start = resume_id(request, last_event_id)
        if start is None:
            latest = await ui.ctx.redis.xrevrange(keys.EVENTS, "+", "-", 1)
            start = latest[0][0] if latest else "0-0"
        return EventSourceResponse(tail(ui, user, request, start, channel), ping=15)

    return router


async def tail(
    ui: UiService, user: UiUser, request: Request, last_id: str, channel: str | None
) -> AsyncIterator[ServerSentEvent]:
    """``/api/events`` for the UI: the same stream and visibility, plus each message's HTML."""
    ctx, pages = ui.ctx, ChatPages(ui, user)
    ctx.metrics.sse_clients.inc()
    try:
        while not await request.is_disconnected():
            try:
                reply = await ctx.redis.xread({keys.EVENTS: last_id}, count=200, block=BLOCK_MS)
            except RedisTimeoutError:  # a client configured with a shorter socket timeout
                continue
            for entry_id, fields in reply[0][1] if reply else []:
                last_id = entry_id
                if not ctx.chat.visible_event(user.principal, fields):
                    continue
                if channel is not None and fields.get("channel") != channel:
                    continue
                data: dict[str, Any] = dict(fields)
                if fields.get("type", "message") == "message" and "id" in fields:
                    message = message_from_fields(fields["id"], fields)
                    data["html"] = pages.render_messages([message], {}, [entry_id])
                data.setdefault("type", "message")
                # No SSE event name: the page's one onmessage handler sees every type (in ``type``).
                yield ServerSentEvent(data=json.dumps(data), id=entry_id)
    finally:
        ctx.metrics.sse_clients.dec()
