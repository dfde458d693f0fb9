"""Group chat on Redis Streams: channels, DMs, threads, @mentions, inboxes and read cursors.

Layout: one stream per channel (DMs are channels named ``dm:<a>:<b>`` with exactly two members),
one inbox stream per principal (fed by mentions, DMs, replies and notices), and one global event
stream that the SSE endpoint tails. A post writes all of these in one Lua script, so a message is
either accepted everywhere or nowhere, under one id: its entry in the channel, in each recipient's
inbox and in the event stream all carry the same stream id, drawn from one sequence for every
channel, so a message id is unique across channels (see docs/gateway.md, "Message ids").
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Awaitable, Callable
from contextlib import nullcontext

from gateway import keys
from gateway.chat_post import PostContext, check_text, message_fields, recipients
from gateway.chat_scripts import POST_SCRIPT
from gateway.config import GatewaySettings
from gateway.errors import ChatError, Unauthorized
from gateway.events import EventHub, id_key
from gateway.metrics import GatewayMetrics
from gateway.models import (
    FIRST_ID,
    LAST_ID,
    Channel,
    InboxItem,
    Message,
    optional_message_id,
    parse_message_id,
)
from gateway.principals import Principal, PrincipalKind, PrincipalStore
from gateway.redis_facade import StrRedis
from gateway.waits_budget import WaitBudget

CHANNEL_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")  # fullmatch: "$" would let a trailing "\n" in
MENTION_RE = re.compile(r"(?<![\w@./-])@([a-z][a-z0-9-]{0,38})(?![\w-])")
INBOX_WAIT_SLICE = 2.0  # a blocked wait checks this often that its caller is still there
# An empty wait ends at a random moment in its last tenth: agents that began waiting together (a
# swarm's start, a post to @all) would otherwise all come back together at every wait's end, and
# each such herd of re-armed waits delays delivery to everyone (docs/performance.md, "Scale").
WAIT_SPREAD = 0.1
SEARCH_SCAN = 2000  # messages scanned per channel by search; bounded on purpose
DEDUPE_TTL_S = 7 * 86_400  # how long a deduplicated post remembers it was made
KNOWN_CHANNELS_MAX = 10_000  # channels (DMs included) a replica remembers having read; then it starts over


def dm_channel(a: str, b: str) -> str:
    first, second = sorted((a, b))
    return f"dm:{first}:{second}"


def dm_members(channel: str) -> tuple[str, str] | None:
    parts = channel.split(":")
    if len(parts) == 3 and parts[0] == "dm":
        return parts[1], parts[2]
    return None


def parse_mentions(text: str) -> list[str]:
    """@names in order of first appearance, without duplicates."""
    seen: dict[str, None] = {}
    for match in MENTION_RE.finditer(text):
        seen.setdefault(match.group(1), None)
    return list(seen)


def unknown_mentions(names: list[str]) -> ChatError:
    return ChatError("unknown mention(s): " + ", ".join(f"@{n}" for n in names))


def client_id(value: str | None, param: str) -> str | None:
    """A message id from a client, canonical, or a 400 BadMessageId naming ``param`` (REST and MCP alike)."""
    return optional_message_id(value, param)


def message_from_fields(entry_id: str, fields: dict[str, str]) -> Message:
    return Message(
        id=entry_id,
        channel=fields["channel"],
        sender=fields["sender"],
        text=fields["text"],
        ts=float(fields["ts"]),
        reply_to=fields.get("reply_to") or None,
        thread=fields.get("thread") or None,
        mentions=[m for m in fields.get("mentions", "").split(",") if m],
        kind=fields.get("kind", "message"),
    )


def inbox_item_from_fields(entry_id: str, fields: dict[str, str]) -> InboxItem:
    return InboxItem(
        id=entry_id,
        reason=fields["reason"],
        channel=fields["channel"],
        message_id=fields["message_id"],
        sender=fields["sender"],
        text=fields["text"],
        ts=float(fields["ts"]),
        thread=fields.get("thread") or None,
    )


class ChatService:
    """All chat operations; callers pass the authenticated principal, never a claimed name."""

    def __init__(
        self,
        redis: StrRedis,
        principals: PrincipalStore,
        settings: GatewaySettings,
        metrics: GatewayMetrics,
        hub: EventHub | None = None,
        waits: WaitBudget | None = None,
    ) -> None:
        self.redis = redis
        self.principals = principals
        self.settings = settings
        self.metrics = metrics
        self.hub = hub  # blocked inbox waits wait on it (no Redis connection each) while it runs
        self.waits = waits or WaitBudget(settings.max_waits_per_agent)
        self._post = redis.register_script(POST_SCRIPT)
        # Channels this replica has read (a channel is never removed, and a post from this cache has its
        # channel checked by the post script, so a stale entry costs a 404, never a post into nothing):
        # a plain post into one skips the read before its script.
        self._known: dict[str, Channel] = {}

    # -- channels ---------------------------------------------------------------------------

    async def ensure_default_channels(self) -> None:
        for name in self.settings.default_channels:
            await self._create_channel(Channel(name=name, created_by="system", created=time.time()))

    async def _create_channel(self, channel: Channel) -> bool:
        meta = channel.model_dump_json(include={"name", "topic", "kind", "created_by", "created"})
        return bool(await self.redis.hsetnx(keys.CHANNELS, channel.name, meta))

    async def create_channel(self, principal: Principal, name: str, topic: str = "") -> Channel:
        if not CHANNEL_RE.fullmatch(name):
            raise ChatError(f"bad channel name {name!r}: use a-z, 0-9, '-' and '_' (max 64)")
        channel = Channel(name=name, topic=topic, created_by=principal.name, created=time.time())
        # Each channel is a stream everyone's channel list and every search walks: agents get a count.
        counted = principal.kind == PrincipalKind.agent
        limit = self.settings.max_channels_per_agent
        if await self.redis.hexists(keys.CHANNELS, name):
            raise ChatError(f"channel {name!r} already exists", status=409)
        if counted and await self.redis.incr(keys.channels_created(principal.name)) > limit:
            await self.redis.decr(keys.channels_created(principal.name))
            raise ChatError(
                f"{principal.name} has created {limit} channels, the limit per agent "
                "(max_channels_per_agent)",
                status=429,
            )
        if not await self._create_channel(channel):
            if counted:
                await self.redis.decr(keys.channels_created(principal.name))
            raise ChatError(f"channel {name!r} already exists", status=409)
        await self.redis.sadd(keys.channel_members(name), principal.name)
        channel.members = [principal.name]
        return channel

    async def get_channel(self, name: str) -> Channel | None:
        raw = await self.redis.hget(keys.CHANNELS, name)
        return Channel.model_validate_json(raw) if raw else None

    def can_read(self, principal: Principal, channel: str) -> bool:
        members = dm_members(channel)
        if members is None:
            return True
        return principal.name in members or principal.kind == PrincipalKind.operator

    async def _readable_channel(self, principal: Principal, name: str) -> Channel:
        channel = await self.get_channel(name)
        # A DM someone else is in answers exactly like a missing channel: no existence oracle.
        if channel is None or not self.can_read(principal, name):
            raise ChatError(f"no channel {name!r}", status=404)
        return channel

    async def list_channels(self, principal: Principal) -> list[Channel]:
        raw = await self.redis.hgetall(keys.CHANNELS)
        channels = [Channel.model_validate_json(v) for v in raw.values()]
        visible = sorted((c for c in channels if self.can_read(principal, c.name)), key=lambda c: c.name)
        cursors = await self.redis.hgetall(keys.cursors(principal.name))
        async with self.redis.pipeline(transaction=False) as pipe:
            for c in visible:
                pipe.smembers(keys.channel_members(c.name))
                pipe.xrange(
                    keys.channel_stream(c.name), self._after(cursors.get(f"chan:{c.name}")), "+", 1000
                )
            replies = await pipe.execute()
        for i, c in enumerate(visible):
            c.members = sorted(replies[2 * i])
            c.unread = len(replies[2 * i + 1])
        return visible

    @staticmethod
    def _after(cursor: str | None) -> str:
        return f"({cursor}" if cursor else "-"

    async def join(self, principal: Principal, name: str) -> Channel:
        channel = await self._readable_channel(principal, name)
        if channel.kind == "dm":
            raise ChatError("DMs have exactly their two members; nobody joins them", status=403)
        await self.redis.sadd(keys.channel_members(name), principal.name)
        return channel

    async def leave(self, principal: Principal, name: str) -> Channel:
        channel = await self._readable_channel(principal, name)
        if channel.kind == "dm":
            raise ChatError("nobody leaves a DM", status=403)
        await self.redis.srem(keys.channel_members(name), principal.name)
        return channel

    async def set_topic(self, principal: Principal, name: str, topic: str) -> Channel:
        channel = await self._readable_channel(principal, name)
        if channel.kind == "dm":
            raise ChatError("DMs have no topic", status=403)
        channel.topic = topic
        await self.redis.hset(keys.CHANNELS, name, channel.model_dump_json(exclude={"members", "unread"}))
        return channel

    async def ensure_dm(self, principal: Principal, peer: str) -> str:
        if peer == principal.name:
            raise ChatError("a DM needs another principal")
        if not await self.principals.exists(peer):
            raise ChatError(f"unknown principal {peer!r}", status=404)
        name = dm_channel(principal.name, peer)
        created = await self._create_channel(
            Channel(name=name, kind="dm", created_by=principal.name, created=time.time())
        )
        if created:
            await self.redis.sadd(keys.channel_members(name), principal.name, peer)
        return name

    # -- posting ----------------------------------------------------------------------------

    async def post(
        self,
        principal: Principal,
        channel: str,
        text: str,
        reply_to: str | None = None,
        kind: str = "message",
        dedupe: str | None = None,
    ) -> Message:
        """Post ``text``; with ``dedupe``, a key (scoped to the sender) that makes retries of the same
        post after a crash land once: a repeat returns the first post's id and writes nothing.

        Check the text, read what the checks need (one pipeline: the channel, the mentioned names, the
        parent, the members for @all), resolve the recipients (``gateway.chat_post``), then one script
        checks the sender's rate and writes the post everywhere (``chat_scripts.POST_SCRIPT``). A post
        with no reply and no @all into a channel this replica has read skips the read: the script checks
        the channel and the mentioned names instead (one round trip)."""
        check_text(text, self.settings.max_message_bytes)
        reply_to = client_id(reply_to, "reply_to")
        mentions = parse_mentions(text)
        named = [m for m in mentions if m != "all"]
        known = self._known.get(channel) if not reply_to and "all" not in mentions else None
        if known is not None and self.can_read(principal, channel):
            context = PostContext(meta=known, cached=True)  # the script checks the channel and the names
        else:
            context = await self._post_context(principal, channel, named, reply_to, "all" in mentions)
        reasons = recipients(principal.name, dm_members(channel), named, context, kind)
        fields = message_fields(channel, principal.name, text, reply_to, context, mentions, kind)
        return await self._write_post(principal, context, fields, reasons, dedupe, named)

    async def _post_context(
        self, principal: Principal, channel: str, named: list[str], reply_to: str | None, mention_all: bool
    ) -> PostContext:
        """One pipelined read, then the refusals it decides: no such channel (or a DM of others: the
        same 404, no existence oracle), an unknown mention, a parent that is not in the channel."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(keys.CHANNELS, channel)
            for name in named:
                pipe.sismember(keys.PRINCIPALS, name)
            if reply_to:
                pipe.xrange(keys.channel_stream(channel), reply_to, reply_to)
            if mention_all:
                pipe.smembers(keys.channel_members(channel))
            replies = await pipe.execute()
        raw_meta, known = replies[0], replies[1 : 1 + len(named)]
        rest = replies[1 + len(named) :]
        parent = rest.pop(0) if reply_to else None
        members: set[str] = rest.pop(0) if mention_all else set()

        meta = Channel.model_validate_json(raw_meta) if raw_meta else None
        if meta is None or not self.can_read(principal, channel):
            raise ChatError(f"no channel {channel!r}", status=404)
        if len(self._known) >= KNOWN_CHANNELS_MAX:
            self._known.clear()
        self._known[channel] = meta
        unknown = [n for n, ok in zip(named, known, strict=True) if not ok]
        if unknown:
            raise unknown_mentions(unknown)
        context = PostContext(meta=meta, members=members)
        if reply_to:
            if not parent:
                raise ChatError(f"no message {reply_to} in {channel!r}", status=404)
            parent_fields = parent[0][1]
            context.thread = parent_fields.get("thread") or reply_to
            context.parent_sender = parent_fields["sender"]
        return context

    async def _write_post(
        self,
        principal: Principal,
        context: PostContext,
        fields: dict[str, str],
        reasons: dict[str, str],
        dedupe: str | None,
        named: list[str],
    ) -> Message:
        meta = context.meta
        channel = meta.name
        flat = [x for pair in fields.items() for x in pair]
        recipients = sorted(reasons)
        settings = self.settings
        reply = await self._post(
            keys=[
                keys.channel_stream(channel),
                keys.EVENTS,
                keys.thread_index(channel, fields["thread"] or "none"),
                keys.dedupe(principal.name, dedupe or "-"),
                keys.rate(principal.name),
                keys.channel_members(channel),
                keys.WAKE,
                keys.CHANNELS,
                keys.PRINCIPALS,
                keys.MESSAGE_SEQUENCE,
                *(keys.inbox(r) for r in recipients),
            ],
            args=[
                settings.channel_maxlen,
                settings.events_maxlen,
                settings.inbox_maxlen,
                DEDUPE_TTL_S if dedupe else 0,
                settings.rate_limit_per_sec,
                settings.rate_limit_burst,
                time.time(),
                1 if meta.kind == "channel" else 0,  # posting in a channel joins it
                principal.name,
                keys.WAKE_MAXLEN,
                ",".join(keys.inbox_topic(r) for r in recipients),
                channel if context.cached else "",
                ",".join(named) if context.cached else "",
                len(flat),
                *flat,
                *(reasons[r] for r in recipients),
            ],
        )
        if isinstance(reply, list) and reply[0] == "nochannel":  # gone since this replica read it
            self._known.pop(channel, None)
            raise ChatError(f"no channel {channel!r}", status=404)
        if isinstance(reply, list) and reply[0] == "nomention":
            raise unknown_mentions(reply[1:])
        if isinstance(reply, list):  # {'rate', seconds}: the sender's bucket is empty
            raise self._rate_refusal(float(reply[1]))
        self.metrics.messages_posted.labels(kind=meta.kind).inc()
        return message_from_fields(reply, fields)

    def _rate_refusal(self, wait: float) -> ChatError:
        retry = max(1, int(wait + 0.999))
        return ChatError(
            f"rate limit: {self.settings.rate_limit_per_sec:g} messages/s per sender; retry in {retry}s",
            status=429,
            headers={"Retry-After": str(retry)},
        )

    async def post_dm(
        self,
        principal: Principal,
        peer: str,
        text: str,
        reply_to: str | None = None,
        dedupe: str | None = None,
    ) -> Message:
        reply_to = client_id(reply_to, "reply_to")  # before the DM is opened: a refusal leaves nothing
        channel = await self.ensure_dm(principal, peer)
        return await self.post(principal, channel, text, reply_to, dedupe=dedupe)

    async def notify(self, sender: Principal, channel: str, text: str) -> Message:
        """A system notice: mentioned principals get it in their inbox as reason ``notice``."""
        return await self.post(sender, channel, text, kind="notice")

    # -- reading ----------------------------------------------------------------------------

    async def history(
        self,
        principal: Principal,
        channel: str,
        before: str | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> list[Message]:
        """A page of history in chronological order: the latest, or before/after an id (exclusive)."""
        before = client_id(before, "before")
        after = client_id(after, "after")
        if before and after:
            raise ChatError("give before or after, not both")
        limit = max(1, min(limit, self.settings.history_max_limit))
        await self._readable_channel(principal, channel)
        if after == LAST_ID or before == FIRST_ID:
            return []  # nothing lies beyond the ends (and Redis refuses an exclusive bound there)
        stream = keys.channel_stream(channel)
        if after:
            entries = await self.redis.xrange(stream, f"({after}", "+", limit)
        else:
            entries = list(
                reversed(await self.redis.xrevrange(stream, f"({before}" if before else "+", "-", limit))
            )
        return [message_from_fields(i, f) for i, f in entries]

    async def read_new(
        self, principal: Principal, channel: str, after: str | None = None, limit: int = 50
    ) -> list[Message]:
        """Messages after ``after`` (default: the caller's read cursor) and advance that cursor."""
        after = client_id(after, "after")
        if after is None:
            after = await self.redis.hget(keys.cursors(principal.name), f"chan:{channel}")
        if after is None:
            messages = await self.history(principal, channel, limit=limit)
        else:
            messages = await self.history(principal, channel, after=after, limit=limit)
        if messages:
            await self.redis.hset(keys.cursors(principal.name), f"chan:{channel}", messages[-1].id)
        return messages

    async def thread(self, principal: Principal, channel: str, root_id: str) -> list[Message]:
        root_id = parse_message_id(root_id, "root_id")
        await self._readable_channel(principal, channel)
        stream = keys.channel_stream(channel)
        ids = [root_id, *await self.redis.lrange(keys.thread_index(channel, root_id), 0, -1)]
        async with self.redis.pipeline(transaction=False) as pipe:
            for i in ids:
                pipe.xrange(stream, i, i)
            found = await pipe.execute()
        return [message_from_fields(*entry[0]) for entry in found if entry]

    async def search(self, principal: Principal, query: str, limit: int = 50) -> list[Message]:
        """Case-insensitive substring search over the recent history of channels the caller can read."""
        needle = query.lower().strip()
        if not needle:
            raise ChatError("empty search query")
        hits: list[Message] = []
        for channel in await self.list_channels(principal):
            for entry_id, fields in await self.redis.xrevrange(
                keys.channel_stream(channel.name), "+", "-", SEARCH_SCAN
            ):
                if needle in fields.get("text", "").lower():
                    hits.append(message_from_fields(entry_id, fields))
        hits.sort(key=lambda m: m.ts, reverse=True)
        return hits[:limit]

    # -- inbox ------------------------------------------------------------------------------

    async def inbox(
        self,
        principal: Principal,
        wait: float = 0.0,
        limit: int = 50,
        gone: Callable[[], Awaitable[bool]] | None = None,
        valid: Callable[[], Awaitable[bool]] | None = None,
        advance: bool = True,
    ) -> list[InboxItem]:
        """New inbox items after the caller's cursor; blocks up to ``wait`` s for the first one.

        With ``advance`` the cursor moves past what is returned, so each item is handed out once per
        principal (at most once); without it the caller acknowledges what it handled (``ack_inbox``),
        and whatever it did not is handed out again (at least once).
        While the event hub runs, a blocked wait holds no Redis connection: it is woken when a post
        names this inbox, then reads it with one pooled command. The wait is cut into slices so that a
        caller who went away (``gone()``) stops it early.
        """
        wait = max(0.0, min(wait, self.settings.inbox_max_wait)) * (1 - WAIT_SPREAD * random.random())
        limit = max(1, min(limit, self.settings.history_max_limit))
        stream = keys.inbox(principal.name)
        cursor = await self.redis.hget(keys.cursors(principal.name), "inbox") or "0-0"
        # ``valid`` (the caller's token still good) joins ``gone``: revoking it wakes this inbox's
        # waiters (PrincipalStore), which then end here instead of waiting out their slice.
        stop = _either(gone, valid)
        with self.waits.hold(principal) if wait > 0 else nullcontext():
            if wait > 0 and self.hub is not None and self.hub.active:
                entries = await self._wait_on_hub(principal, stream, cursor, wait, limit, stop)
            else:
                entries = await self._read_blocking(stream, cursor, wait, limit, stop)
        if valid is not None and not await valid():
            # Nothing is handed out (the cursor stays): the items wait for the principal's next token.
            raise Unauthorized("invalid or revoked token")
        if not entries:
            return []
        if advance:
            await self.redis.hset(keys.cursors(principal.name), "inbox", entries[-1][0])
        items = [inbox_item_from_fields(i, f) for i, f in entries]
        now = time.time()
        for item in items:
            self.metrics.post_to_inbox_seconds.observe(max(0.0, now - item.ts))
        return items

    async def _wait_on_hub(
        self,
        principal: Principal,
        stream: str,
        cursor: str,
        wait: float,
        limit: int,
        gone: Callable[[], Awaitable[bool]] | None,
    ) -> list[tuple[str, dict[str, str]]]:
        assert self.hub is not None
        deadline = time.monotonic() + wait
        # Armed before the first read: a post that lands after it wakes the watch.
        with self.hub.watch(keys.inbox_topic(principal.name)) as watch:
            entries = await self.redis.xrange(stream, f"({cursor}", "+", limit)
            while not entries and (left := deadline - time.monotonic()) > 0:
                woken = await watch.wait(min(left, INBOX_WAIT_SLICE))
                # Re-read when woken, when a wake-up may have been missed, and once at the end.
                must_read = woken or watch.stale or deadline - time.monotonic() <= 0
                watch.arm()  # before the read, so that a post after it still wakes us
                if must_read:
                    entries = await self.redis.xrange(stream, f"({cursor}", "+", limit)
                if not entries and gone is not None and await gone():
                    return []
        return entries

    async def _read_blocking(
        self,
        stream: str,
        cursor: str,
        wait: float,
        limit: int,
        gone: Callable[[], Awaitable[bool]] | None,
    ) -> list[tuple[str, dict[str, str]]]:
        """Without the hub (a ChatService used outside an app): blocking reads, a connection each."""
        entries = await self.redis.xrange(stream, f"({cursor}", "+", limit)
        deadline = time.monotonic() + wait
        while not entries and (left := deadline - time.monotonic()) > 0:
            block = max(1, int(min(left, INBOX_WAIT_SLICE) * 1000))
            reply = await self.redis.xread({stream: cursor}, count=limit, block=block)
            entries = reply[0][1] if reply else []
            if not entries and gone is not None and await gone():
                return []
        return entries

    async def ack_inbox(self, principal: Principal, through: str) -> str:
        """Move the caller's inbox cursor forward to ``through`` (an item it has handled), never back
        and never past the newest item; the cursor as it now stands."""
        through = client_id(through, "through") or "0-0"
        cursors = keys.cursors(principal.name)
        cursor = await self.redis.hget(cursors, "inbox") or "0-0"
        newest = await self.redis.xrevrange(keys.inbox(principal.name), "+", "-", 1)
        target = min(through, newest[0][0], key=id_key) if newest else cursor
        if id_key(target) > id_key(cursor):
            await self.redis.hset(cursors, "inbox", target)
            return target
        return cursor

    async def peek_inbox(self, principal: Principal, limit: int = 50) -> list[InboxItem]:
        """Unread inbox items without advancing the cursor."""
        stream = keys.inbox(principal.name)
        cursor = await self.redis.hget(keys.cursors(principal.name), "inbox") or "0-0"
        entries = await self.redis.xrange(stream, f"({cursor}", "+", limit)
        return [inbox_item_from_fields(i, f) for i, f in entries]

    def visible_event(self, principal: Principal, fields: dict[str, str]) -> bool:
        channel = fields.get("channel")
        return channel is None or self.can_read(principal, channel)


def _either(
    gone: Callable[[], Awaitable[bool]] | None, valid: Callable[[], Awaitable[bool]] | None
) -> Callable[[], Awaitable[bool]] | None:
    """When a wait stops early: its caller went away, or the caller's token stopped being valid."""
    if valid is None:
        return gone

    async def stop() -> bool:
        return (gone is not None and await gone()) or not await valid()

    return stop
