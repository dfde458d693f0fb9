"""REST API under /api: principals, channels, messages, DMs, threads, inbox, search, heartbeats."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BaseModel, Field

from gateway import keys
from gateway.auth import still_valid
from gateway.context import GatewayContext
from gateway.deps import AnyPrincipal, Ctx, OperatorOnly, ctx_of
from gateway.errors import NotFound
from gateway.models import (
    MESSAGE_ID_SCHEMA,
    Channel,
    ChannelCreate,
    Heartbeat,
    InboxItem,
    Message,
    PostRequest,
    PrincipalCreate,
    TopicUpdate,
)
from gateway.principals import PrincipalKind
from gateway.swarm.liveness import LivenessReport, liveness_book

# Message-id parameters declare their form; the chat service checks it (a 400 naming the parameter).
AN_ID: dict[str, Any] = {"json_schema_extra": MESSAGE_ID_SCHEMA}


class Me(BaseModel):
    name: str = Field(description="Your principal name.")
    kind: str = Field(description="agent, operator, worker or gate.")
    email: str = Field(description="The git e-mail your commits must carry.")


class AgentInfo(BaseModel):
    name: str
    kind: str
    email: str
    disabled: bool = Field(description="True while quarantined.")
    last_heartbeat: float | None = Field(None, description="Unix time of the last heartbeat.")
    state: str | None = Field(None, description="State the agent last reported.")
    doing: str | None = Field(None, description="What the agent last said it was doing.")


class PrincipalCreated(BaseModel):
    name: str
    kind: str
    email: str
    token: str = Field(description="Shown once; only its hash is stored.")


class Messages(BaseModel):
    messages: list[Message]


class InboxPage(BaseModel):
    items: list[InboxItem]


class InboxAck(BaseModel):
    through: str = Field(description="The id of the last inbox item handled; the cursor moves up to it.")


class InboxCursor(BaseModel):
    cursor: str = Field(description="The inbox cursor after the call: items after it are unread.")


class Revoked(BaseModel):
    revoked: int


router = APIRouter(prefix="/api")


# Routes are tried in the order they are defined: the calls agents make every turn come first. These
# read the context off the request (``ctx_of``) rather than take ``Ctx``: each dependency costs FastAPI
# ~70 Python calls per request to solve, ~5 % of a post (docs/performance.md, "Fewer layers per call").
@router.post("/channels/{channel}/messages", response_model=Message, status_code=201)
async def post(channel: str, body: PostRequest, request: Request, principal: AnyPrincipal) -> Message:
    return await ctx_of(request).chat.post(principal, channel, body.text, body.reply_to)


@router.post("/dms/{peer}/messages", response_model=Message, status_code=201, summary="Send a DM")
async def dm(peer: str, body: PostRequest, request: Request, principal: AnyPrincipal) -> Message:
    return await ctx_of(request).chat.post_dm(principal, peer, body.text, body.reply_to)


@router.get("/inbox", response_model=InboxPage, summary="New inbox items; waits server-side")
async def inbox(
    request: Request,
    principal: AnyPrincipal,
    wait: Annotated[float, Query(ge=0, description="Seconds to block until something arrives")] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    peek: Annotated[bool, Query(description="Do not advance the cursor")] = False,
    ack: Annotated[
        bool,
        Query(
            description="Advance the cursor past what is returned (false: wait, then acknowledge "
            "handled items with POST /api/inbox/ack; unacknowledged ones come again)"
        ),
    ] = True,
) -> InboxPage:
    chat = ctx_of(request).chat
    if peek:
        return InboxPage(items=await chat.peek_inbox(principal, limit))
    items = await chat.inbox(
        principal, wait, limit, gone=request.is_disconnected, valid=still_valid(request), advance=ack
    )
    return InboxPage(items=items)


@router.post("/inbox/ack", response_model=InboxCursor, summary="Mark inbox items handled (cursor)")
async def inbox_ack(request: Request, principal: AnyPrincipal, body: InboxAck) -> InboxCursor:
    return InboxCursor(cursor=await ctx_of(request).chat.ack_inbox(principal, body.through))


@router.post("/heartbeat", status_code=204, summary="Report liveness (agents)")
async def heartbeat(body: Heartbeat, request: Request, principal: AnyPrincipal) -> Response:
    await ctx_of(request).redis.hset(
        keys.heartbeat(principal.name),
        mapping={"ts": repr(time.time()), "state": body.state, "doing": body.doing},
    )
    return Response(status_code=204)


@router.get("/me", response_model=Me, summary="The caller's principal")
async def me(principal: AnyPrincipal) -> Me:
    return Me(name=principal.name, kind=principal.kind.value, email=principal.email)


@router.get("/agents", response_model=list[AgentInfo], summary="Agents with their last heartbeat")
async def agents(ctx: Ctx, _: AnyPrincipal) -> list[AgentInfo]:
    return await list_principal_infos(ctx, PrincipalKind.agent)


@router.get(
    "/agents/liveness",
    response_model=LivenessReport,
    summary="Every agent's liveness: the one state all views show (operators only)",
)
async def liveness(ctx: Ctx, _: OperatorOnly) -> LivenessReport:
    return await liveness_book(ctx).report()


@router.get("/principals", response_model=list[AgentInfo], summary="All principals (operators only)")
async def principals(ctx: Ctx, _: OperatorOnly) -> list[AgentInfo]:
    return await list_principal_infos(ctx, None)


@router.post("/principals", response_model=PrincipalCreated, status_code=201, summary="Create a principal")
async def create_principal(body: PrincipalCreate, ctx: Ctx, _: OperatorOnly) -> PrincipalCreated:
    p, token = await ctx.principals.create(body.name, PrincipalKind(body.kind), body.email)
    return PrincipalCreated(name=p.name, kind=p.kind.value, email=p.email, token=token)


@router.post("/principals/{name}/tokens", response_model=PrincipalCreated, status_code=201)
async def issue_token(name: str, ctx: Ctx, _: OperatorOnly) -> PrincipalCreated:
    token = await ctx.principals.issue_token(name)
    p = await ctx.principals.get(name)
    assert p is not None
    return PrincipalCreated(name=p.name, kind=p.kind.value, email=p.email, token=token)


@router.delete(
    "/principals/{name}/tokens", response_model=Revoked, summary="Revoke all tokens of a principal"
)
async def revoke_tokens(name: str, ctx: Ctx, _: OperatorOnly) -> Revoked:
    if await ctx.principals.get(name) is None:
        raise NotFound(f"unknown principal {name!r}")
    return Revoked(revoked=await ctx.principals.revoke_tokens(name))


@router.post("/principals/{name}/disable", response_model=AgentInfo, summary="Quarantine: refuse its tokens")
async def disable(name: str, ctx: Ctx, _: OperatorOnly) -> AgentInfo:
    return await set_disabled(ctx, name, True)


@router.post("/principals/{name}/enable", response_model=AgentInfo, summary="Release from quarantine")
async def enable(name: str, ctx: Ctx, _: OperatorOnly) -> AgentInfo:
    return await set_disabled(ctx, name, False)


@router.get("/channels", response_model=list[Channel], summary="Channels and DMs visible to the caller")
async def channels(ctx: Ctx, principal: AnyPrincipal) -> list[Channel]:
    return await ctx.chat.list_channels(principal)


@router.post("/channels", response_model=Channel, status_code=201, summary="Create a channel")
async def create_channel(body: ChannelCreate, ctx: Ctx, principal: AnyPrincipal) -> Channel:
    return await ctx.chat.create_channel(principal, body.name, body.topic)


@router.post("/channels/{channel}/join", response_model=Channel)
async def join(channel: str, ctx: Ctx, principal: AnyPrincipal) -> Channel:
    return await ctx.chat.join(principal, channel)


@router.post("/channels/{channel}/leave", response_model=Channel)
async def leave(channel: str, ctx: Ctx, principal: AnyPrincipal) -> Channel:
    return await ctx.chat.leave(principal, channel)


@router.put("/channels/{channel}/topic", response_model=Channel)
async def topic(channel: str, body: TopicUpdate, ctx: Ctx, principal: AnyPrincipal) -> Channel:
    return await ctx.chat.set_topic(principal, channel, body.topic)


@router.get("/channels/{channel}/messages", response_model=Messages, summary="A page of channel history")
async def history(
    channel: str,
    ctx: Ctx,
    principal: AnyPrincipal,
    before: Annotated[str | None, Query(description="Only messages older than this id", **AN_ID)] = None,
    after: Annotated[str | None, Query(description="Only messages newer than this id", **AN_ID)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> Messages:
    return Messages(messages=await ctx.chat.history(principal, channel, before, after, limit))


@router.get("/channels/{channel}/threads/{root_id}", response_model=Messages, summary="A thread")
async def thread(
    channel: str,
    root_id: Annotated[str, Path(description="The root's id", **AN_ID)],
    ctx: Ctx,
    principal: AnyPrincipal,
) -> Messages:
    return Messages(messages=await ctx.chat.thread(principal, channel, root_id))


@router.get("/search", response_model=Messages, summary="Search messages the caller can read")
async def search(
    ctx: Ctx,
    principal: AnyPrincipal,
    q: Annotated[str, Query(min_length=1, max_length=200)],
    limit: Annotated[int, Query(ge=1, le=500)] = 50,  # a negative one would slice results off the end
) -> Messages:
    return Messages(messages=await ctx.chat.search(principal, q, limit))


async def set_disabled(ctx: GatewayContext, name: str, disabled: bool) -> AgentInfo:
    p = await ctx.principals.set_disabled(name, disabled)
    return AgentInfo(name=p.name, kind=p.kind.value, email=p.email, disabled=p.disabled)


async def list_principal_infos(ctx: GatewayContext, kind: PrincipalKind | None) -> list[AgentInfo]:
    found = await ctx.principals.list(kind)
    async with ctx.redis.pipeline(transaction=False) as pipe:
        for p in found:
            pipe.hgetall(keys.heartbeat(p.name))
        beats = await pipe.execute()
    return [
        AgentInfo(
            name=p.name,
            kind=p.kind.value,
            email=p.email,
            disabled=p.disabled,
            last_heartbeat=float(b["ts"]) if b.get("ts") else None,
            state=b.get("state"),
            doing=b.get("doing"),
        )
        for p, b in zip(found, beats, strict=True)
    ]
