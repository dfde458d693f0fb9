"""Feeds the search index from Redis: the event stream as it grows, the channel streams to catch up.

The cursor (the last ``ks:events`` entry indexed) is stored with the rows in one SQLite transaction.
At first start, and whenever the event stream was trimmed past the cursor (its oldest entry is newer),
the index first reads every channel's and DM's own stream (capped by the chat, but much longer than
what the event stream keeps), then goes on from the event stream: rows already there are ignored.
"""

from __future__ import annotations

import asyncio
import logging

from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway import keys
from gateway.cancellation import rounds
from gateway.monitor.kinds import event_kind
from gateway.principals import PrincipalKind, PrincipalStore
from gateway.redis_facade import StrRedis
from gateway.search.index import Row, SearchIndex

log = logging.getLogger("kswarm.search")
BATCH = 500
BLOCK_MS = 2000


def _older(a: str, b: str) -> bool:
    """Stream id ``a`` < ``b``."""
    ma, sa = (int(x) for x in a.split("-"))
    mb, sb = (int(x) for x in b.split("-"))
    return (ma, sa) < (mb, sb)


class SearchFeeder:
    def __init__(self, redis: StrRedis, principals: PrincipalStore, index: SearchIndex) -> None:
        self.redis = redis
        self.principals = principals
        self.index = index
        self.kinds: dict[str, PrincipalKind | None] = {}

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
        log.info("search index: backfilled %d message(s) from the channel streams", added)

    async def step(self, block_ms: int = BLOCK_MS) -> int:
        """Index the events after the cursor (waiting up to ``block_ms`` for one); returns how many."""
        cursor = await self.index.cursor() or "0-0"
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
        return len(entries)

    async def run(self) -> None:
        for _ in rounds():
            try:
                await self.catch_up()
                for _ in rounds():
                    await self.step()
                    first = await self.redis.xrange(keys.EVENTS, "-", "+", 1)
                    cursor = await self.index.cursor()
                    if first and cursor and _older(cursor, first[0][0]):
                        break  # trimmed past us: catch up again
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis down, a disk error: try again, the cursor says where we were
                log.exception("search feeder failed; retrying")
                # A cancellation here must end the loop: swallowed, it left the task "cancelling" forever
                # and a stopping gateway waiting on it (a killed XREAD connection, then Ctrl-C).
                await asyncio.sleep(1.0)
