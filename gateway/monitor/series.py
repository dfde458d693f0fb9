"""Per-minute history in Redis with a bounded retention: one hash per series and UTC day.

A series is a name (``messages``, ``tokens:agent:dev-1``, ``jobs:queued:cpu``, ...) and a value per
minute: counters add up within their minute, gauges keep the last value sampled in it. The hash of a
day (``ks:mon:s:<series>:<day>``, field = minute of the day) expires ``retention_days`` after its last
write, so the history never grows past the retention however many series there are.

Writes come in a ``Batch`` applied by one Lua script that first checks the feeder's lease: a replica
that lost the lease (paused, partitioned) writes nothing, and a batch's counters and the event cursor
move together, so an event is counted once.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from gateway.monitor import keys
from gateway.redis_facade import StrRedis

DAY_S = 86_400
MINUTE_S = 60

# KEYS: lease, cursor, series index, then every key a write touches.
# ARGV: owner, cursor value ('' = leave), ttl_s, now, then per write: op, key index, field, value, series.
# ops: i = HINCRBYFLOAT (+TTL), s = HSET (+TTL), x = HINCRBY (no TTL), h = HSET (no TTL), d = HDEL.
APPLY = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local ttl, now = tonumber(ARGV[3]), ARGV[4]
local i = 5
while i <= #ARGV do
  local op, key = ARGV[i], KEYS[tonumber(ARGV[i + 1])]
  local fld, value, name = ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  if op == 'i' then
    redis.call('HINCRBYFLOAT', key, fld, value)
    redis.call('EXPIRE', key, ttl)
  elseif op == 's' then
    redis.call('HSET', key, fld, value)
    redis.call('EXPIRE', key, ttl)
  elseif op == 'x' then
    redis.call('HINCRBY', key, fld, value)
  elseif op == 'h' then
    redis.call('HSET', key, fld, value)
  elseif op == 'd' then
    redis.call('HDEL', key, fld)
  end
  if name ~= '' then redis.call('ZADD', KEYS[3], now, name) end
  i = i + 5
end
if ARGV[2] ~= '' then redis.call('SET', KEYS[2], ARGV[2]) end
return 1
"""

# KEYS: lease. ARGV: owner, ttl_ms. Take the lease when free, renew it when ours.
LEASE = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
return 1
"""


def day_of(ts: float) -> int:
    return int(ts // DAY_S)


def minute_of(ts: float) -> int:
    return int((ts % DAY_S) // MINUTE_S)


def bucket_start(ts: float) -> float:
    return float(int(ts // MINUTE_S) * MINUTE_S)


@dataclass
class Write:
    op: str
    key: str
    field: str
    value: str
    series: str = ""


@dataclass
class Batch:
    """Writes applied together, under the lease, with the event cursor."""

    writes: list[Write] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.writes)

    def incr(self, series: str, ts: float, value: float = 1.0) -> None:
        if value and math.isfinite(value):
            key = keys.series(series, day_of(ts))
            self.writes.append(Write("i", key, str(minute_of(ts)), repr(float(value)), series))

    def gauge(self, series: str, ts: float, value: float) -> None:
        if math.isfinite(value):
            key = keys.series(series, day_of(ts))
            self.writes.append(Write("s", key, str(minute_of(ts)), repr(float(value)), series))

    def hincr(self, key: str, field_name: str, value: int) -> None:
        if value:
            self.writes.append(Write("x", key, field_name, str(int(value))))

    def hset(self, key: str, field_name: str, value: str) -> None:
        self.writes.append(Write("h", key, field_name, value))

    def hdel(self, key: str, field_name: str) -> None:
        self.writes.append(Write("d", key, field_name, ""))


@dataclass(frozen=True)
class Point:
    ts: float  # start of the minute
    value: float


class SeriesStore:
    """Reads and (under the feeder's lease) writes the per-minute history."""

    def __init__(self, redis: StrRedis, retention_days: int) -> None:
        self.redis = redis
        self.retention_s = retention_days * DAY_S
        self._apply = redis.register_script(APPLY)
        self._lease = redis.register_script(LEASE)

    async def take_lease(self, owner: str, ttl_s: float) -> bool:
        return bool(await self._lease(keys=[keys.LEASE], args=[owner, int(ttl_s * 1000)]))

    async def release_lease(self, owner: str) -> None:
        if await self.redis.get(keys.LEASE) == owner:
            await self.redis.delete(keys.LEASE)

    async def apply(self, batch: Batch, owner: str, cursor: str = "") -> bool:
        """Apply ``batch`` (and move the cursor) if ``owner`` holds the lease; False if it does not."""
        key_index: dict[str, int] = {}
        all_keys = [keys.LEASE, keys.CURSOR, keys.SERIES_INDEX]
        args: list[str] = [owner, cursor, str(self.retention_s + DAY_S), repr(time.time())]
        for w in batch.writes:
            if w.key not in key_index:
                all_keys.append(w.key)
                key_index[w.key] = len(all_keys)
            args += [w.op, str(key_index[w.key]), w.field, w.value, w.series]
        return bool(await self._apply(keys=all_keys, args=args))

    async def cursor(self) -> str | None:
        value = await self.redis.get(keys.CURSOR)
        return str(value) if value else None

    async def names(self, prefix: str = "") -> list[str]:
        """Series written within the retention, optionally only those starting with ``prefix``."""
        since = time.time() - self.retention_s
        found = await self.redis.zrangebyscore(keys.SERIES_INDEX, since, "+inf")
        return sorted(str(n) for n in found if str(n).startswith(prefix))

    async def read(self, name: str, since: float, until: float) -> list[Point]:
        """The minutes of ``name`` in [since, until] that have a value, oldest first."""
        since = max(since, time.time() - self.retention_s)
        if until < since:
            return []
        days = list(range(day_of(since), day_of(until) + 1))
        async with self.redis.pipeline(transaction=False) as pipe:
            for day in days:
                pipe.hgetall(keys.series(name, day))
            raw = await pipe.execute()
        points = []
        for day, values in zip(days, raw, strict=True):
            for minute, value in values.items():
                ts = day * DAY_S + int(minute) * MINUTE_S
                if since - MINUTE_S < ts <= until:
                    points.append(Point(float(ts), float(value)))
        points.sort(key=lambda p: p.ts)
        return points

    async def total(self, name: str, since: float, until: float) -> float:
        return sum(p.value for p in await self.read(name, since, until))


def resample(
    points: list[Point], since: float, until: float, step_s: float, gauge: bool = False
) -> list[Point]:
    """``points`` in buckets of ``step_s``: counters summed (empty buckets 0), gauges the last value
    (carried forward from the previous bucket)."""
    step_s = max(MINUTE_S, step_s)
    start = int(since // step_s) * step_s
    n = max(1, math.ceil((until - start) / step_s))
    sums = [0.0] * n
    last: list[float | None] = [None] * n
    for p in points:
        i = int((p.ts - start) // step_s)
        if 0 <= i < n:
            sums[i] += p.value
            last[i] = p.value
    out = []
    carried = 0.0
    for i in range(n):
        if gauge:
            seen = last[i]
            carried = seen if seen is not None else carried
            out.append(Point(start + i * step_s, carried))
        else:
            out.append(Point(start + i * step_s, sums[i]))
    return out
