"""Each agent's timeline: what it reports about its own wakes, model calls and tool calls.

Agents write it themselves (``POST /api/timeline`` with their own token: the agent's name comes from the
token, never from the body, so no agent writes another's timeline). The gateway keeps it in one stream
per agent (``ks:timeline:<agent>``, capped at ``timeline_maxlen``), stamps each entry with its arrival
time and, for model calls, an estimated cost from the LLM proxy's price table. Operators read every
timeline; an agent reads only its own (it holds tool output that may quote DMs).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.errors import Forbidden
from gateway.models import FIRST_ID
from gateway.monitor import keys
from gateway.monitor.models import Doing, ModelRate, TimelineEntry, TimelineIn, TimelinePage
from gateway.principals import Principal, PrincipalKind
from gateway.redis_facade import StrRedis

# (model, token counts) -> (cost in USD, the rate used when that cost is an estimate, else None)
Pricer = Callable[[str | None, list[int]], tuple[float, ModelRate | None]]
TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
SCAN_CHUNK = 500
BLOCK_MS = 2000


def age_text(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def brief_input(data: dict[str, Any], limit: int = 80) -> str:
    """A tool call's arguments in one short line (the command of a bash call, else compact JSON)."""
    args = data.get("input")
    if isinstance(args, dict):
        text = args.get("command") if isinstance(args.get("command"), str) else json.dumps(args)
    else:
        text = "" if args is None else str(args)
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def doing_of(entries: list[TimelineEntry], now: float | None = None) -> Doing | None:
    """From the newest entries (newest first): the tool call running now, else the last one and its age."""
    now = now or time.time()
    finished: set[str] = set()
    for entry in entries:
        if entry.kind == "tool_result" and entry.call_id:
            finished.add(entry.call_id)
        elif entry.kind == "tool_call":
            tool = str(entry.data.get("name") or entry.summary or "tool")
            args = brief_input(entry.data)
            label = f"{tool}({args})" if args else tool
            if entry.call_id and entry.call_id not in finished:
                return Doing(
                    text=f"running {label} for {age_text(now - entry.ts)}",
                    tool=tool,
                    running=True,
                    since=entry.ts,
                )
            return Doing(text=f"last: {label}, {age_text(now - entry.ts)} ago", tool=tool, since=entry.ts)
    return None


def matches(entry: TimelineEntry, query: str, kinds: set[str]) -> bool:
    if kinds and entry.kind not in kinds:
        return False
    if not query:
        return True
    hay = (entry.summary + " " + json.dumps(entry.data, default=str)).lower()
    return all(word in hay for word in query.lower().split())


class TimelineStore:
    def __init__(self, redis: StrRedis, maxlen: int, pricer: Pricer | None = None) -> None:
        self.redis = redis
        self.maxlen = maxlen
        self.pricer = pricer

    @staticmethod
    def check_writer(principal: Principal) -> None:
        if principal.kind != PrincipalKind.agent:
            raise Forbidden(
                f"timelines are written by agents about themselves; {principal.name} is a "
                f"{principal.kind.value}"
            )

    @staticmethod
    def check_reader(principal: Principal, agent: str) -> None:
        if principal.kind != PrincipalKind.operator and principal.name != agent:
            raise Forbidden("an agent reads only its own timeline (operators read every one)")

    def _cost(self, entry: TimelineIn) -> dict[str, Any]:
        """The gateway's fields of a model call: ``cost_usd`` and, for a model without a price of its own
        (``scripted``, unknown), ``cost_estimate`` and the ``rate`` used."""
        usage = entry.data.get("usage")
        if entry.kind != "model" or self.pricer is None or not isinstance(usage, dict):
            return {"cost_usd": None}
        counts = [int(usage.get(f) or 0) if isinstance(usage.get(f), int) else 0 for f in TOKEN_FIELDS]
        model = entry.data.get("model")
        try:
            cost, rate = self.pricer(model if isinstance(model, str) else None, counts)
        except Exception:  # an unknown model or a price table without it: no estimate, not an error
            return {"cost_usd": None}
        estimate = {"cost_estimate": True, "rate": rate.model_dump()} if rate is not None else {}
        return {"cost_usd": round(cost, 6)} | estimate

    async def append(self, principal: Principal, entries: list[TimelineIn]) -> list[str]:
        """Store ``entries`` as ``principal``'s (an agent's own); returns their ids."""
        self.check_writer(principal)
        now = time.time()
        async with self.redis.pipeline(transaction=False) as pipe:
            for entry in entries:
                record = entry.model_dump() | {"agent": principal.name, "received": now} | self._cost(entry)
                pipe.xadd(
                    keys.timeline(principal.name),
                    {"json": json.dumps(record, default=str)},
                    maxlen=self.maxlen,
                    approximate=True,
                )
            replies = await pipe.execute()
        return [str(r) for r in replies[: len(entries)]]

    @staticmethod
    def _entry(entry_id: str, fields: dict[str, str]) -> TimelineEntry | None:
        try:
            return TimelineEntry.model_validate(json.loads(fields.get("json", "{}")) | {"id": entry_id})
        except ValueError:
            return None

    async def page(
        self,
        agent: str,
        before: str | None = None,
        limit: int = 50,
        query: str = "",
        kinds: set[str] | None = None,
    ) -> TimelinePage:
        """Newest first, ``limit`` entries older than ``before`` that match ``query`` and ``kinds``."""
        kinds = kinds or set()
        found: list[TimelineEntry] = []
        if before == FIRST_ID:  # nothing is older than the first id (and Redis refuses "(0-0")
            doing = await self.doing(agent)
            return TimelinePage(agent=agent, entries=[], more=False, doing=doing.text if doing else "")
        upper = f"({before}" if before else "+"
        scanned = 0
        more = False
        while scanned < self.maxlen * 2:
            batch = await self.redis.xrevrange(keys.timeline(agent), upper, "-", SCAN_CHUNK)
            for entry_id, fields in batch:
                entry = self._entry(entry_id, fields)
                if entry is not None and matches(entry, query, kinds):
                    if len(found) == limit:
                        more = True
                        break
                    found.append(entry)
            scanned += len(batch)
            if more or len(batch) < SCAN_CHUNK:
                break
            upper = f"({batch[-1][0]}"
        doing = await self.doing(agent)
        return TimelinePage(agent=agent, entries=found, more=more, doing=doing.text if doing else "")

    async def latest(self, agent: str, count: int = 100) -> list[TimelineEntry]:
        raw = await self.redis.xrevrange(keys.timeline(agent), "+", "-", count)
        return [e for entry_id, fields in raw if (e := self._entry(entry_id, fields)) is not None]

    async def doing(self, agent: str) -> Doing | None:
        return doing_of(await self.latest(agent))

    async def doing_many(self, agents: list[str]) -> dict[str, Doing]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for agent in agents:
                pipe.xrevrange(keys.timeline(agent), "+", "-", 100)
            raw = await pipe.execute()
        out = {}
        for agent, rows in zip(agents, raw, strict=True):
            entries = [e for entry_id, f in rows if (e := self._entry(entry_id, f)) is not None]
            if (doing := doing_of(entries)) is not None:
                out[agent] = doing
        return out

    async def last_id(self, agent: str) -> str:
        latest = await self.redis.xrevrange(keys.timeline(agent), "+", "-", 1)
        return str(latest[0][0]) if latest else "0-0"

    async def follow(
        self, agent: str, after: str, gone: Callable[[], Any] | None = None
    ) -> AsyncIterator[TimelineEntry]:
        """Entries after ``after``, as they arrive (oldest first), until ``gone()`` says the client left."""
        last = after
        while gone is None or not await gone():
            try:
                reply = await self.redis.xread({keys.timeline(agent): last}, count=200, block=BLOCK_MS)
            except RedisTimeoutError:
                continue
            for entry_id, fields in reply[0][1] if reply else []:
                last = entry_id
                entry = self._entry(entry_id, fields)
                if entry is not None:
                    yield entry
