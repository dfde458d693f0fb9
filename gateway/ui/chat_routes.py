"""The Chat panel: channels and DMs, live over SSE, threads, scroll-back, search, the operator composer."""

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from redis.exceptions import RedisError
from sse_starlette import EventSourceResponse, ServerSentEvent

from gateway import keys
from gateway.chat import dm_channel, dm_members, message_from_fields
from gateway.errors import GatewayError, NotFound
from gateway.events import SSE_WAIT_S, resume_id
from gateway.models import (
    FIRST_ID,
    MAX_ID_PART,
    MESSAGE_ID_SCHEMA,
    Message,
    optional_message_id,
    parse_message_id,
)
from gateway.monitor.kinds import KINDS, event_kind
from gateway.ui.auth import UiUser
from gateway.ui.deps import UiDep, UiSvc
from gateway.ui.feed import PAGE, FeedFilter, FeedItem, SenderKinds, classify, feed
from gateway.ui.internal import has_route, segment
from gateway.ui.service import UiService

ALL = "*"  # the pseudo-channel "all activity": every channel and DM, interleaved
MAX_PAGES = 20
FTS_ROUTE = "/api/search/messages"
SEARCH_PAGE = 25


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

    async def filtered(self, channel: str, only: FeedFilter, before: str | None = None) -> list[Message]:
        """A page of ``channel`` whose messages pass ``only`` (scanning back at most MAX_PAGES pages)."""
        if not only.active:
            return await self.messages(channel, before=before) if before else await self.messages(channel)
        kinds = SenderKinds(self.ui.ctx)
        found: list[Message] = []
        cursor = before
        for _ in range(MAX_PAGES):
            page = await self.messages(channel, before=cursor) if cursor else await self.messages(channel)
            for m in reversed(page):
                fields = {"type": "message", "channel": m.channel, "sender": m.sender}
                if only.matches(fields, event_kind(fields, await kinds.of(m.sender))):
                    found.append(m)
            if len(page) < PAGE or len(found) >= PAGE:
                break
            cursor = page[0].id
        return list(reversed(found[:PAGE]))

    async def kinds_of(self, messages: list[Message]) -> list[str]:
        kinds = SenderKinds(self.ui.ctx)
        out = []
        for m in messages:
            fields = {"type": "message", "channel": m.channel, "sender": m.sender}
            out.append(event_kind(fields, await kinds.of(m.sender)))
        return out

    async def reply_counts(self, channel: str | None, messages: list[Message]) -> dict[str, int]:
        roots = [m for m in messages if not m.thread]
        async with self.ui.ctx.redis.pipeline(transaction=False) as pipe:
            for m in roots:
                pipe.llen(keys.thread_index(channel or m.channel, m.id))
            counts = await pipe.execute()
        return {m.id: n for m, n in zip(roots, counts, strict=True) if n}

    def render_messages(
        self,
        messages: list[Message],
        replies: dict[str, int],
        events: list[str] | None = None,
        kinds: list[str] | None = None,
    ) -> str:
        return self.ui.renderer.render(
            "_messages.html",
            messages=messages,
            replies=replies,
            events=events or [""] * len(messages),
            kinds=kinds,
            me=self.user.principal.name,
        )

    def render_feed(self, items: list[FeedItem], replies: dict[str, int]) -> str:
        return self.ui.renderer.render(
            "_feed.html", items=items, replies=replies, me=self.user.principal.name
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


router = APIRouter(prefix="/ui")


@router.get("/chat", response_class=HTMLResponse, summary="Chat: channels, DMs, live")
async def chat(
    ui: UiSvc,
    request: Request,
    user: UiDep,
    c: Annotated[str, Query(description="Channel, dm:<a>:<b>, or * for all")] = ALL,
    dm: Annotated[str | None, Query(description="Open a DM with this principal")] = None,
    at: Annotated[
        str | None,
        Query(description="Show the history around this message id", json_schema_extra=MESSAGE_ID_SCHEMA),
    ] = None,
    agent: Annotated[str | None, Query(max_length=64, description="Only this agent's activity")] = None,
    kind: Annotated[str | None, Query(max_length=16, description="chat, pr, job, gate or ops")] = None,
) -> HTMLResponse:
    pages = ChatPages(ui, user)
    at = optional_message_id(at, "at")
    only = FeedFilter.of(agent, kind)
    if dm:
        c = dm_channel(user.principal.name, dm)
    channels_reply = await pages.api.get("/api/channels")
    channels = channels_reply.json() if channels_reply.ok else []
    known = {ch["name"] for ch in channels}
    principals = await pages.api.get("/api/principals")
    names = sorted(p["name"] for p in (principals.json() if principals.ok else []))
    if dm and dm not in names:
        raise NotFound(f"unknown principal {dm!r}")
    error = ""
    more = bool(at)
    if c == ALL:
        items, more = await feed(ui.ctx, user.principal, None, only)
        messages = [i.message for i in items if i.message is not None]
        html = pages.render_feed(items, await pages.reply_counts(None, messages))
    else:
        if c not in known:
            messages = []
            error = "" if dm else f"no channel {c!r}"
        elif at:
            messages = await pages.messages(c, before=at) + await pages.messages(c, after=predecessor(at))
        else:
            messages = await pages.filtered(c, only)
        more = more or len(messages) >= PAGE
        replies = await pages.reply_counts(None, messages)
        html = pages.render_messages(messages, replies, None, await pages.kinds_of(messages))
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
        messages_html=html,
        more=more,
        at=at or "",
        only=only,
        kinds=KINDS,
        post_url=post_url,
        placeholder=placeholder,
        error=error,
        topic=next((ch.get("topic", "") for ch in channels if ch["name"] == c), ""),
    )


@router.get("/chat/history", response_class=HTMLResponse, summary="Older messages (a fragment)")
async def history(
    ui: UiSvc,
    user: UiDep,
    c: str,
    before: Annotated[
        str, Query(description="Message (or, for *, event) id", json_schema_extra=MESSAGE_ID_SCHEMA)
    ],
    agent: Annotated[str | None, Query(max_length=64)] = None,
    kind: Annotated[str | None, Query(max_length=16)] = None,
) -> HTMLResponse:
    pages = ChatPages(ui, user)
    before = parse_message_id(before, "before")
    only = FeedFilter.of(agent, kind)
    if c == ALL:
        items, more = await feed(ui.ctx, user.principal, before, only)
        messages = [i.message for i in items if i.message is not None]
        html = pages.render_feed(items, await pages.reply_counts(None, messages))
    else:
        messages = await pages.filtered(c, only, before)
        more = len(messages) >= PAGE
        replies = await pages.reply_counts(None, messages)
        html = pages.render_messages(messages, replies, None, await pages.kinds_of(messages))
    return HTMLResponse(html, headers={"X-More": "1" if more else "0"})


@router.get("/chat/thread", response_class=HTMLResponse, summary="A thread (a fragment)")
async def thread(
    ui: UiSvc, user: UiDep, c: str, root: Annotated[str, Query(json_schema_extra=MESSAGE_ID_SCHEMA)]
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


@router.get("/chat/search", response_class=HTMLResponse, summary="Search all history (ranked)")
async def search(
    ui: UiSvc,
    request: Request,
    user: UiDep,
    q: Annotated[str, Query(max_length=200)] = "",
    channel: Annotated[str | None, Query(max_length=200)] = None,
    sender: Annotated[str | None, Query(max_length=64)] = None,
    kind: Annotated[str | None, Query(max_length=16)] = None,
    offset: Annotated[int, Query(ge=0, le=100_000)] = 0,
    order: Annotated[str, Query(pattern="^(rank|newest)$")] = "rank",
) -> HTMLResponse:
    pages = ChatPages(ui, user)
    hits: list[dict[str, Any]] = []
    total, error = 0, ""
    indexed = has_route(request.app, FTS_ROUTE)
    if q.strip():
        if indexed:
            params = {"q": q, "channel": channel or None, "sender": sender or None, "kind": kind or None}
            reply = await pages.api.get(FTS_ROUTE, limit=SEARCH_PAGE, offset=offset, order=order, **params)
            if reply.ok:
                total, hits = reply.json()["total"], reply.json()["hits"]
            else:
                error = reply.detail
        else:  # the chat's own scan of recent history (no index plugin)
            reply = await pages.api.get("/api/search", q=q, limit=100)
            if reply.ok:
                hits = [m | {"snippet_html": "", "activity": ""} for m in reply.json()["messages"]]
                total = len(hits)
            else:
                error = reply.detail
    return ui.page(
        "search.html",
        request,
        user,
        "chat",
        q=q,
        channel=channel or "",
        sender=sender or "",
        kind=kind or "",
        kinds=KINDS,
        order=order,
        error=error,
        hits=hits,
        total=total,
        offset=offset,
        page_size=SEARCH_PAGE,
        indexed=indexed,
    )


@router.get("/events", summary="Live events (SSE) for the UI session, with rendered messages")
async def events(
    ui: UiSvc,
    request: Request,
    user: UiDep,
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


async def tail(
    ui: UiService, user: UiUser, request: Request, last_id: str, channel: str | None
) -> AsyncIterator[ServerSentEvent]:
    """``/api/events`` for the UI: the same stream and visibility, plus each message's HTML."""
    ctx, pages = ui.ctx, ChatPages(ui, user)
    kinds = SenderKinds(ctx)
    ctx.metrics.sse_clients.inc()
    try:
        while not await request.is_disconnected():
            try:  # the gateway's one reader wakes every stream: an open page holds no Redis connection
                entries = await ctx.hub.events_after(last_id, SSE_WAIT_S)
            except RedisError:  # Redis away or the pool busy (logged there): the stream waits, then retries
                await asyncio.sleep(1)
                continue
            for entry_id, fields in entries:
                last_id = entry_id
                if not ctx.chat.visible_event(user.principal, fields):
                    continue
                if channel is not None and fields.get("channel") != channel:
                    continue
                data: dict[str, Any] = dict(fields)
                kind_of = fields.get("type", "message")
                if kind_of == "message" and "id" in fields:
                    message = message_from_fields(fields["id"], fields)
                    data["activity"] = await classify(ctx, fields, kinds)
                    data["html"] = pages.render_messages([message], {}, [entry_id], [data["activity"]])
                elif kind_of == "job":
                    data["activity"] = "job"
                    data["html"] = pages.render_feed([FeedItem(entry_id, "job", job=dict(fields))], {})
                data.setdefault("type", "message")
                # No SSE event name: the page's one onmessage handler sees every type (in ``type``).
                yield ServerSentEvent(data=json.dumps(data), id=entry_id)
    finally:
        ctx.metrics.sse_clients.dec()
