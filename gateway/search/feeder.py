"""Feeds the search index from Redis: the event stream as it grows, the channel streams to catch up.

The cursor (the last ``ks:events`` entry indexed) is stored with the rows in one SQLite transaction.
At first start, and whenever the event stream was trimmed past the cursor (its oldest entry is newer),
the index first reads every channel's and DM's own stream (capped by the chat, but much longer than
what the event stream keeps), then goes on from the event stream: rows already there are ignored.
"""

from __future__ import annotations

import asyncio
import logging
import time

from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway import keys
from gateway.cancellation import nap, rounds
from gateway.monitor.kinds import event_kind
from gateway.principals import PrincipalKind, PrincipalStore
from gateway.redis_facade import StrRedis
from gateway.search.index import Row, SearchIndex

log = logging.getLogger("kswarm.search")
BATCH = 500
BLOCK_MS = 2000
BATCH_DELAY_S = 0.2  # how long new messages gather before they are indexed (SearchSettings.batch_delay_s)
TRIM_CHECK_S = 5.0  # how often the feeder checks whether the event stream was trimmed past its cursor


def _older(a: str, b: str) -> bool:
    """Stream id ``a`` < ``b``."""
    ma, sa = (int(x) for x in a.split("-"))
    mb, sb = (int(x) for x in b.split("-"))
    return (ma, sa) < (mb, sb)


class SearchFeeder:
    """Indexes messages in batches: after each write it lets the next messages gather for
    ``batch_delay_s``, so that a busy swarm costs one transaction per batch, not one per message (the
    first message after a quiet spell is indexed at once)."""

    def __init__(
        self,
        redis: StrRedis,
        principals: PrincipalStore,
        index: SearchIndex,
        batch_delay_s: float = BATCH_DELAY_S,
    ) -> None:
        self.redis = redis
        self.principals = principals
        self.index = index
        self.batch_delay_s = batch_delay_s
        self.kinds: dict[str, PrincipalKind | None] = {}
        self._cursor: str | None = None  # the index's cursor as last written (read once per catch-up)

    async def sender_kind(self, name: str) -> PrincipalKind | None:
        if name not in self.kinds:
            principal = await self.principals.get(name) if name else None
            self.kinds[name] = principal.kind if principal else None
        return self.kinds[name]

    async def row(self, channel: str, msg_id: str, fields: dict[str, str]) -> Row | None:
        if "text" not in fields or "sender" not in fields:
            return None
        sender = fields["sender"]
        activity = event_kind(
            {**fields, "type": "message", "channel": channel}, await self.sender_kind(sender)
        )
        return Row(
            channel=channel,
            msg_id=msg_id,
            sender=sender,
            ts=float(fields.get("ts") or 0),
            kind=fields.get("kind", "message"),
            activity=activity,
            thread=fields.get("thread") or None,
            mentions=fields.get("mentions", ""),
            text=fields["text"],
        )

    async def backfill(self) -> int:
        """Every channel's and DM's stream into the index (idempotent); returns rows added."""
        added = 0
        for channel in sorted(await self.redis.hkeys(keys.CHANNELS)):
            lower = "-"
            while True:
                rows = await self.redis.xrange(keys.channel_stream(channel), lower, "+", BATCH)
                batch = [r for entry_id, f in rows if (r := await self.row(channel, entry_id, f)) is not None]
                added += await self.index.add(batch)
                if len(rows) < BATCH:
                    break
                lower = f"({rows[-1][0]}"
        return added

    async def catch_up(self) -> None:
        """Backfill when the index has no cursor or the event stream no longer reaches back to it."""
        cursor = await self.index.cursor()
        first = await self.redis.xrange(keys.EVENTS, "-", "+", 1)
        if cursor is not None and (not first or not _older(cursor, first[0][0])):
            return
        latest = await self.redis.xrevrange(keys.EVENTS, "+", "-", 1)
        mark = latest[0][0] if latest else "0-0"
        added = await self.backfill()
        if cursor is None or _older(cursor, mark):
            await self.index.add([], cursor=mark)  # events after mark are tailed; earlier ones are in
            self._cursor = mark
        log.info("search index: backfilled %d message(s) from the channel streams", added)

    async def trimmed_past(self) -> bool:
        """Whether the event stream no longer reaches back to the cursor (a catch-up is due)."""
        first = await self.redis.xrange(keys.EVENTS, "-", "+", 1)
        return bool(first and self._cursor and _older(self._cursor, first[0][0]))

    async def step(self, block_ms: int = BLOCK_MS) -> int:
        """Index the events after the cursor (waiting up to ``block_ms`` for one); returns how many."""
        if self._cursor is None:
            self._cursor = await self.index.cursor()
        cursor = self._cursor or "0-0"
        try:
            reply = await self.redis.xread({keys.EVENTS: cursor}, count=BATCH, block=block_ms)
        except RedisTimeoutError:
            return 0
        entries = reply[0][1] if reply else []
        if not entries:
            return 0
        rows = []
        for _, fields in entries:
            if fields.get("type", "message") == "message" and fields.get("id") and fields.get("channel"):
                row = await self.row(fields["channel"], fields["id"], fields)
                if row is not None:
                    rows.append(row)
        await self.index.add(rows, cursor=entries[-1][0])
        self._cursor = entries[-1][0]
        return len(entries)

    async def gather(self) -> None:
        """The pause after a write that was not a full batch: the next messages gather meanwhile."""
        await nap(self.batch_delay_s)

    async def run(self) -> None:
        for _ in rounds():
            try:
                self._cursor = None  # read again from the index: a failed write may not have landed
                await self.catch_up()
                checked = time.monotonic()
                for _ in rounds():
                    if await self.step() < BATCH:
                        await self.gather()
                    if time.monotonic() - checked >= TRIM_CHECK_S:
                        checked = time.monotonic()
                        if await self.trimmed_past():
                            break  # trimmed past us: catch up again
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis down, a disk error: try again, the cursor says where we were
                log.exception("search feeder failed; retrying")
                await nap(1.0)
