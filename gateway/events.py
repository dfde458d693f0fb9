"""The gateway's event hub (one Redis reader per process for every waiter) and SSE at /api/events.

Waiting costs no Redis connection per waiter. ``EventHub`` is the process's one blocking reader: a
loop of ``XREAD BLOCK`` over the global event stream (``ks:events``, what SSE shows) and the wake-up
stream (``ks:wake``, which inboxes a post wrote to), on a connection of its own outside the pool. It
keeps the recent events in memory and wakes whoever waits: an SSE stream reads the events it has not
sent from that memory, a blocked inbox wait (REST or MCP) is woken when its topic is named and then
reads its own inbox with one ordinary pooled command. So a thousand waiting agents hold one
connection between them, and the pool (``GatewaySettings.redis_pool_size``) only serves commands that
return at once.

Correctness never depends on a wake-up: the data stays in its stream. A waiter that was not woken
reads again when its wait ends, or when the hub restarted or failed in between (``Watch.stale``); an
SSE subscriber whose position is older than the hub's memory reads Redis directly. The hub's blocking
read is time-sliced (``BLOCK_MS``), so shutdown never waits on it.

The hub follows ``ks:events`` only while an SSE stream reads from it (and ``FOLLOW_LINGER_S`` after the
last one): waiters need only ``ks:wake``, and a post nobody watches live then costs the gateway no read
(issue 26: ~10 % of a post's gateway CPU). The first subscriber nudges the reader with an empty entry
on ``ks:wake``; the reader then starts from the newest event, and whoever is behind that reads Redis.

Each SSE event's id is its Redis stream id, so a client that reconnects with ``Last-Event-ID``
resumes exactly after the last event it received: nothing lost, nothing repeated.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from redis.asyncio import ConnectionPool, Redis
from redis.exceptions import RedisError
from sse_starlette import EventSourceResponse, ServerSentEvent

from gateway import keys
from gateway.auth import current_principal, still_valid
from gateway.cancellation import STOP_WAIT_S, nap, rounds, stop_task
from gateway.metrics import GatewayMetrics
from gateway.models import MESSAGE_ID_SCHEMA, optional_message_id
from gateway.principals import Principal
from gateway.redis_facade import StrRedis, str_redis

if TYPE_CHECKING:
    from gateway.context import GatewayContext

log = logging.getLogger("kswarm.events")

BLOCK_MS = 1000  # the hub's blocking read, sliced: cancelling it (shutdown) never waits longer
READ_COUNT = 500  # entries per read: a burst is taken in a few reads
RECENT_EVENTS = 4096  # events kept in memory for SSE subscribers (older positions read Redis)
SSE_WAIT_S = 5.0  # an SSE stream checks its client is still there at least this often
SSE_PAGE = 200  # events sent per read
LOG_INTERVAL_S = 30.0  # a failing hub says so at most this often
FOLLOW_LINGER_S = 30.0  # the hub keeps following ks:events this long after the last SSE read


def id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class _Topic:
    """The waiters of one topic: one event they all wait on, set (and dropped) by the hub."""

    __slots__ = ("event", "waiters")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.waiters = 0


class Watch:
    """One waiter's registration on a topic. Armed before the waiter reads, so that a write after the
    read wakes it; re-armed (``arm``) before each later read."""

    __slots__ = ("_entry", "_epoch", "hub", "topic")

    def __init__(self, hub: EventHub, topic: str) -> None:
        self.hub = hub
        self.topic = topic
        self._entry: _Topic | None = None
        self._epoch = 0
        self.arm()

    def arm(self) -> None:
        self.release()
        self._entry = self.hub._enter(self.topic)
        self._epoch = self.hub.epoch

    def release(self) -> None:
        if self._entry is not None:
            self.hub._leave(self.topic, self._entry)
            self._entry = None

    @property
    def stale(self) -> bool:
        """A wake-up may have been missed since arming: the hub restarted, failed or is not reading."""
        return self._epoch != self.hub.epoch or not self.hub.live

    async def wait(self, seconds: float) -> bool:
        """True when woken, False when ``seconds`` passed first."""
        assert self._entry is not None, "wait on an armed watch"
        event = self._entry.event
        if event.is_set():
            return True
        try:
            # Not wait_for: on 3.11 it wraps the wait in a task of its own, more objects for every pass
            # of the GC to walk per waiting agent (docs/performance.md, "Scale").
            async with asyncio.timeout(seconds):
                await event.wait()
        except TimeoutError:
            return False
        return True

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


class EventHub:
    """The process's one reader of ``ks:events`` and ``ks:wake``; see the module docstring."""

    def __init__(self, redis: StrRedis, metrics: GatewayMetrics, recent: int = RECENT_EVENTS) -> None:
        self.redis = redis  # the pool: what waiters read with once woken
        self.metrics = metrics
        self.recent_max = recent
        self.active = False  # between start and stop of ``running()``
        self.live = False  # the reader is connected and reading
        self.epoch = 0  # bumped whenever the reader (re)starts or fails: waiters re-read
        self._topics: dict[str, _Topic] = {}
        self._keys: list[tuple[int, int]] = []  # ids of ``_events``, ascending
        self._events: list[tuple[str, dict[str, str]]] = []
        self._covered_after: tuple[int, int] | None = None  # memory holds every event after this id
        self._new_events = asyncio.Event()
        self._events_id: str | None = None  # the reader's positions (events: None while not following)
        self._wake_id: str | None = None
        self._last_log = 0.0
        self._readers = 0  # SSE streams in ``events_after`` now
        self._follow_until = 0.0  # monotonic: and until then, after the last one left
        self._nudged = False  # a nudge is on its way to the reader: later subscribers need not send one

    # -- waiters -----------------------------------------------------------------------------

    def watch(self, topic: str) -> Watch:
        return Watch(self, topic)

    def waiters(self) -> int:
        return sum(t.waiters for t in self._topics.values())

    def _enter(self, topic: str) -> _Topic:
        entry = self._topics.get(topic)
        if entry is None:
            entry = self._topics[topic] = _Topic()
        entry.waiters += 1
        return entry

    def _leave(self, topic: str, entry: _Topic) -> None:
        entry.waiters -= 1
        if entry.waiters <= 0 and self._topics.get(topic) is entry:
            del self._topics[topic]

    def wake(self, topic: str) -> None:
        entry = self._topics.pop(topic, None)
        if entry is not None:
            entry.event.set()

    def _wake_everyone(self) -> None:
        topics, self._topics = self._topics, {}
        for entry in topics.values():
            entry.event.set()
        self._announce()

    def _announce(self) -> None:
        new, self._new_events = self._new_events, asyncio.Event()
        new.set()

    # -- SSE subscribers ---------------------------------------------------------------------

    def _from_memory(self, after: str, count: int) -> list[tuple[str, dict[str, str]]] | None:
        """The events after ``after`` from memory, or None when memory does not reach back that far."""
        if not self.live or self._covered_after is None:
            return None
        position = id_key(after)
        if position < self._covered_after:
            return None
        start = bisect.bisect_right(self._keys, position)
        return self._events[start : start + count]

    @property
    def following(self) -> bool:
        """The reader reads ``ks:events`` into memory (an SSE stream read lately)."""
        return self._events_id is not None

    def _wanted(self) -> bool:
        return self._readers > 0 or time.monotonic() < self._follow_until

    async def _want_events(self) -> None:
        """An SSE stream reads: keep (or start) following ``ks:events``; a reader blocked on the
        wake-up stream alone is nudged by an empty wake-up, so the stream's first event is not late."""
        if self.following or self._nudged or not self.live:
            return
        self._nudged = True
        try:
            await self.redis.xadd(keys.WAKE, {"to": ""}, maxlen=keys.WAKE_MAXLEN, approximate=True)
        except RedisError:  # the reader starts at its next slice (BLOCK_MS) all the same
            self._nudged = False

    async def events_after(
        self, after: str, seconds: float, count: int = SSE_PAGE
    ) -> list[tuple[str, dict[str, str]]]:
        """Up to ``count`` events after ``after``, waiting up to ``seconds`` for the first ([]: none)."""
        self._readers += 1
        try:
            await self._want_events()
            return await self._events_after(after, seconds, count)
        finally:
            self._readers -= 1
            self._follow_until = time.monotonic() + FOLLOW_LINGER_S

    async def _events_after(self, after: str, seconds: float, count: int) -> list[tuple[str, dict[str, str]]]:
        announced = self._new_events  # taken before looking: a batch that lands after the look sets it
        found = self._from_memory(after, count)
        if found is None:  # behind the hub's memory, or no hub: one ordinary (non-blocking) read
            found = await self.redis.xrange(keys.EVENTS, f"({after}", "+", count)
        if found:
            return found
        with suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await announced.wait()
        found = self._from_memory(after, count)
        if found is None:
            found = await self.redis.xrange(keys.EVENTS, f"({after}", "+", count)
        return found

    # -- the reader --------------------------------------------------------------------------

    def _reader_client(self) -> StrRedis:
        """A client with one connection of its own: the blocking read never takes one from the pool."""
        pool = self.redis.connection_pool
        kwargs = dict(pool.connection_kwargs)
        timeout = kwargs.get("socket_timeout")
        if timeout is not None and timeout < BLOCK_MS / 1000 + 5:
            kwargs["socket_timeout"] = BLOCK_MS / 1000 + 5
        own = ConnectionPool(connection_class=pool.connection_class, max_connections=1, **kwargs)
        return str_redis(Redis(connection_pool=own))  # the app pool's kwargs: it decodes too

    @asynccontextmanager
    async def running(self) -> AsyncIterator[EventHub]:
        """Run the reader for the app's lifetime (the app's lifespan enters this)."""
        reader = self._reader_client()
        task = asyncio.create_task(self._run(reader), name="kswarm-event-hub")
        self.active = True
        try:
            yield self
        finally:
            self.active = False
            stopped = await stop_task(task, "the event hub's reader")
            self.live = False
            self._wake_everyone()
            # Its own pool is not closed by the client's aclose: closed here, a read still stuck ends.
            await reader.aclose(close_connection_pool=True)
            if not stopped:
                await asyncio.wait({task}, timeout=STOP_WAIT_S)

    @staticmethod
    async def _newest(reader: StrRedis, stream: str) -> str:
        newest = await reader.xrevrange(stream, "+", "-", 1)
        return newest[0][0] if newest else "0-0"

    async def _follow(self, reader: StrRedis) -> None:
        """Start or stop following ``ks:events``, as SSE streams want it (checked every read)."""
        wanted = self._wanted()
        self._nudged = False  # whatever a nudge asked for is decided here
        if wanted and self._events_id is None:
            self._events_id = await self._newest(reader, keys.EVENTS)
            self._covered_after = id_key(self._events_id)  # memory: every event after now (none yet)
            self._announce()  # a subscriber that read Redis before this point looks again
        elif not wanted and self._events_id is not None:
            self._events_id = self._covered_after = None
            self._keys.clear()
            self._events.clear()

    async def _run(self, reader: StrRedis) -> None:
        failures = 0
        for _ in rounds():
            try:
                if self._wake_id is None:  # a first start reads from now
                    self._wake_id = await self._newest(reader, keys.WAKE)
                self.epoch += 1
                self.live = True
                self._wake_everyone()  # whoever waited across a gap reads again
                for _ in rounds():
                    await self._follow(reader)
                    streams = {keys.WAKE: self._wake_id}
                    if self._events_id is not None:
                        streams[keys.EVENTS] = self._events_id
                    reply = await reader.xread(streams, count=READ_COUNT, block=BLOCK_MS)
                    self._take(reply or [])
                    failures = 0
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:
                self.live = False
                self.epoch += 1
                self._wake_everyone()
                now = time.monotonic()
                if now - self._last_log >= LOG_INTERVAL_S:
                    self._last_log = now
                    log.warning("event hub: reading Redis failed (%r); waiters fall back to re-reading", exc)
                failures += 1
                await nap(min(5.0, 0.1 * 2**failures))

    def _take(self, reply: list[Any]) -> None:
        """One read's entries: wake-ups wake their topics, events go to memory and are announced."""
        for stream, entries in reply:
            if not entries:
                continue
            if stream == keys.WAKE:
                self._wake_id = entries[-1][0]
                woken = 0
                for _, fields in entries:
                    if to := fields.get("to", ""):  # "": a subscriber's nudge, no one to wake
                        woken += 1
                        for topic in to.split(","):
                            self.wake(topic)
                self.metrics.hub_wakeups.inc(woken)
            else:
                self._events_id = entries[-1][0]
                self._remember(entries)
                self._announce()

    def _remember(self, entries: list[tuple[str, dict[str, str]]]) -> None:
        for entry_id, fields in entries:
            self._keys.append(id_key(entry_id))
            self._events.append((entry_id, fields))
        excess = len(self._keys) - self.recent_max
        if excess > self.recent_max // 4:  # trimmed in chunks: amortised O(1) per event
            self._covered_after = self._keys[excess - 1]
            del self._keys[:excess]
            del self._events[:excess]


# -- SSE -------------------------------------------------------------------------------------


async def tail_events(
    ctx: GatewayContext, principal: Principal, last_id: str, request: Request, channel: str | None = None
) -> AsyncGenerator[ServerSentEvent]:
    ctx.metrics.sse_clients.inc()
    valid = still_valid(request)
    try:
        while not await request.is_disconnected():
            try:
                entries = await ctx.hub.events_after(last_id, SSE_WAIT_S)
                if valid is not None and not await valid():  # revoked or quarantined meanwhile: it ends
                    return
            except RedisError:  # Redis away or the pool busy (logged there): the stream waits, then retries
                await asyncio.sleep(1)
                continue
            for entry_id, fields in entries:
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


def resume_id(request: Request, last_event_id: str | None, param: str = "last_event_id") -> str | None:
    """Where a (re)connecting SSE client resumes: ``Last-Event-ID`` (the header wins: it is what a
    reconnecting EventSource sends) or the query parameter ``param``, checked, or None.

    Every SSE stream resumes through this one check; a BadMessageId names the header or the parameter
    it came in, and the app answers it with a 400 before the stream opens.
    """
    header = request.headers.get("last-event-id")
    if header is not None:
        return optional_message_id(header, "Last-Event-ID")
    return optional_message_id(last_event_id or None, param)


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
    ctx.waits.check(principal)  # a 429 now, before the stream's answer starts
    start = resume_id(request, last_event_id)
    if start is None:
        # Resolve "now" to a concrete id up front, so nothing posted after connecting is missed.
        latest = await ctx.redis.xrevrange(keys.EVENTS, "+", "-", 1)
        start = latest[0][0] if latest else "0-0"
    events = ctx.waits.guarded(principal, tail_events(ctx, principal, start, request, channel))
    return EventSourceResponse(events, ping=15)
