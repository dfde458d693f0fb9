"""The task board in Redis: tasks, claims as leases, and lapsed claims waiting to be announced.

A claim is a key ``ks:tasks:claim:<id>`` holding the claimant, with a TTL (Redis expires it: the
lease is authoritative and needs no clock agreement between gateway replicas). Every change of a
claim is one Lua script, so two agents racing for a task cannot both win. ``ks:tasks:leases``
(a sorted set of expected expiry times) lets the sweeper find lapsed claims: it moves each to
``ks:tasks:expired`` exactly once (also when a new claim comes first), and whoever pops an entry
announces it, so each lapse is announced once across replicas.
"""

from __future__ import annotations

import builtins
import json
import time
from typing import Any

from gateway.errors import BoardError
from gateway.redis_facade import StrRedis, Value
from gateway.tasks.models import BoardTask, TaskSpec

PREFIX = "ks:tasks:"
IDS = f"{PREFIX}ids"
LEASES = f"{PREFIX}leases"
EXPIRED = f"{PREFIX}expired"
LEADS = f"{PREFIX}leads"
HOLDER_FIELDS = ("holder", "claimed_at", "renewed_at", "expires_at")


def task_key(task_id: str) -> str:
    return f"{PREFIX}t:{task_id}"


def claim_key(task_id: str) -> str:
    return f"{PREFIX}claim:{task_id}"


# KEYS: task, ids. ARGV: id, spec json, posted_by, created_ms
POST = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'spec', ARGV[2], 'posted_by', ARGV[3], 'created', ARGV[4], 'state', 'open',
           'claims', 0)
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
return 1
"""

# KEYS: task, claim, leases, expired. ARGV: id, agent, ttl_ms, now_ms, max claims (0: any), prefix
CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing', ''} end
if redis.call('HGET', KEYS[1], 'state') == 'done' then
  return {'done', redis.call('HGET', KEYS[1], 'done_by') or ''}
end
local now, ttl = tonumber(ARGV[4]), tonumber(ARGV[3])
local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[2] then return {'held', holder} end
if not holder and tonumber(ARGV[5]) > 0 then
  -- the agent's live claims (a claim key exists while its lease runs), counted in the claim's script
  local held = 0
  for _, id in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    if redis.call('GET', ARGV[6] .. 'claim:' .. id) == ARGV[2] then held = held + 1 end
  end
  if held >= tonumber(ARGV[5]) then return {'limit', tostring(held)} end
end
if not holder then
  local lapsed = redis.call('ZSCORE', KEYS[3], ARGV[1])
  local previous = redis.call('HGET', KEYS[1], 'holder')
  if lapsed and previous and previous ~= ARGV[2] then
    redis.call('RPUSH', KEYS[4], cjson.encode({task=ARGV[1], agent=previous, expired_ms=tonumber(lapsed)}))
  end
  redis.call('HSET', KEYS[1], 'claimed_at', now)
  redis.call('HINCRBY', KEYS[1], 'claims', 1)
end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ttl)
redis.call('ZADD', KEYS[3], now + ttl, ARGV[1])
redis.call('HSET', KEYS[1], 'holder', ARGV[2], 'renewed_at', now, 'expires_at', now + ttl)
if holder then return {'renewed', ARGV[2]} end
return {'ok', ARGV[2]}
"""

# KEYS: task, claim, leases. ARGV: id, agent, ttl_ms, now_ms, explicit (1|0)
RENEW = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing', ''} end
if redis.call('HGET', KEYS[1], 'state') == 'done' then
  return {'done', redis.call('HGET', KEYS[1], 'done_by') or ''}
end
local holder = redis.call('GET', KEYS[2])
if not holder then return {'lapsed', ''} end
if holder ~= ARGV[2] then return {'held', holder} end
local now, ttl = tonumber(ARGV[4]), tonumber(ARGV[3])
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('ZADD', KEYS[3], now + ttl, ARGV[1])
redis.call('HSET', KEYS[1], 'expires_at', now + ttl)
if ARGV[5] == '1' then redis.call('HSET', KEYS[1], 'renewed_at', now) end
return {'ok', holder}
"""

# KEYS: task, claim, leases. ARGV: id, agent, now_ms, done (1|0), result, force (1|0)
FINISH = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing', ''} end
if redis.call('HGET', KEYS[1], 'state') == 'done' then
  return {'done', redis.call('HGET', KEYS[1], 'done_by') or ''}
end
local holder = redis.call('GET', KEYS[2])
if ARGV[6] ~= '1' then
  if holder and holder ~= ARGV[2] then return {'held', holder} end
  if not holder then
    -- a lapsed lease: its last holder may still finish or let go while nobody else has claimed it
    local previous = redis.call('HGET', KEYS[1], 'holder')
    if previous ~= ARGV[2] then return {'unclaimed', previous or ''} end
  end
end
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[1], 'holder', 'claimed_at', 'renewed_at', 'expires_at')
if ARGV[4] == '1' then
  redis.call('HSET', KEYS[1], 'state', 'done', 'done_by', ARGV[2], 'done_at', ARGV[3], 'result', ARGV[5])
end
return {'ok', holder or ''}
"""

# KEYS: leases, expired. ARGV: now_ms, prefix, limit
SWEEP = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
local moved = 0
for _, id in ipairs(ids) do
  local task = ARGV[2] .. 't:' .. id
  local ttl = redis.call('PTTL', ARGV[2] .. 'claim:' .. id)
  if ttl > 0 then
    redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + ttl, id)
  else
    redis.call('ZREM', KEYS[1], id)
    local previous = redis.call('HGET', task, 'holder')
    if previous then
      redis.call('RPUSH', KEYS[2], cjson.encode({task=id, agent=previous,
        expired_ms=tonumber(redis.call('HGET', task, 'expires_at') or ARGV[1])}))
      redis.call('HDEL', task, 'holder', 'claimed_at', 'renewed_at', 'expires_at')
      moved = moved + 1
    end
  end
end
return moved
"""


def _now_ms() -> int:
    return int(time.time() * 1000)


def _seconds(value: str | None) -> float | None:
    return int(value) / 1000 if value else None


class TaskBoard:
    """Typed access to the board; the caller passes the acting principal's name."""

    def __init__(self, redis: StrRedis, claim_ttl_s: float) -> None:
        self.redis = redis
        self.ttl_ms = max(1, int(claim_ttl_s * 1000))
        self._post = redis.register_script(POST)
        self._claim = redis.register_script(CLAIM)
        self._renew = redis.register_script(RENEW)
        self._finish = redis.register_script(FINISH)
        self._sweep = redis.register_script(SWEEP)

    # -- reading ----------------------------------------------------------------------------

    @staticmethod
    def _decode(raw: dict[str, str], live_holder: str | None) -> BoardTask:
        spec = json.loads(raw["spec"])
        done = raw.get("state") == "done"
        state = "done" if done else ("claimed" if live_holder else "open")
        return BoardTask(
            **spec,
            posted_by=raw.get("posted_by", ""),
            created=_seconds(raw.get("created")) or 0.0,
            state=state,
            holder=live_holder if state == "claimed" else None,
            claimed_at=_seconds(raw.get("claimed_at")) if state == "claimed" else None,
            expires_at=_seconds(raw.get("expires_at")) if state == "claimed" else None,
            claims=int(raw.get("claims") or 0),
            done_by=raw.get("done_by") or None,
            done_at=_seconds(raw.get("done_at")),
            result=raw.get("result") if done else None,
        )

    async def get_many(self, ids: list[str]) -> list[BoardTask]:
        if not ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for task_id in ids:
                pipe.hgetall(task_key(task_id))
                pipe.get(claim_key(task_id))
            raws = await pipe.execute()
        return [self._decode(raw, holder) for raw, holder in zip(raws[::2], raws[1::2], strict=True) if raw]

    async def get(self, task_id: str) -> BoardTask:
        found = await self.get_many([task_id])
        if not found:
            raise BoardError(f"no task {task_id!r} on the board", 404)
        return found[0]

    async def held_by(self, agent: str) -> list[str]:
        """The ids of the tasks ``agent`` holds a live claim on, read from the claims alone (one
        ``ZRANGE`` and one ``MGET``): cheap enough for every model call the LLM proxy books."""
        ids = [str(i) for i in await self.redis.zrange(LEASES, 0, -1)]
        if not ids:
            return []
        holders = await self.redis.mget([claim_key(i) for i in ids])
        return sorted(i for i, holder in zip(ids, holders, strict=True) if holder == agent)

    async def list(self, state: str | None = None) -> list[BoardTask]:
        tasks = await self.get_many(await self.redis.zrange(IDS, 0, -1))
        return [t for t in tasks if state in (None, "", "all") or t.state == state]

    # -- changing ---------------------------------------------------------------------------

    async def post(self, spec: TaskSpec, posted_by: str) -> BoardTask:
        keys = [task_key(spec.id), IDS]
        created = await self._post(keys=keys, args=[spec.id, spec.model_dump_json(), posted_by, _now_ms()])
        if not created:
            raise BoardError(f"task {spec.id!r} is already on the board", 409)
        return await self.get(spec.id)

    async def delete(self, task_id: str) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(task_key(task_id), claim_key(task_id))
            pipe.zrem(IDS, task_id)
            pipe.zrem(LEASES, task_id)
            deleted, *_ = await pipe.execute()
        if not deleted:
            raise BoardError(f"no task {task_id!r} on the board", 404)

    @staticmethod
    def _check(task_id: str, reply: builtins.list[str], agent: str) -> str:
        outcome, who = reply[0], reply[1]
        if outcome in ("ok", "renewed"):
            return outcome
        if outcome == "missing":
            raise BoardError(f"no task {task_id!r} on the board", 404)
        if outcome == "done":
            raise BoardError(f"task {task_id!r} is already done (by {who})", 409)
        if outcome == "held":
            raise BoardError(f"task {task_id!r} is claimed by {who}", 409)
        if outcome == "lapsed":
            raise BoardError(f"your claim on {task_id!r} has lapsed: claim it again", 409)
        if outcome == "unclaimed":
            raise BoardError(f"{agent} does not hold a claim on {task_id!r}", 409)
        if outcome == "limit":
            raise BoardError(
                f"{agent} already holds {who} claim(s), the most one agent may hold at once: finish "
                "or release one (task_release) before claiming another",
                429,
            )
        raise BoardError(f"unexpected board answer {reply!r}", 500)

    async def claim(self, task_id: str, agent: str, max_claims: int = 0) -> tuple[BoardTask, bool]:
        """(task, fresh): fresh is False when the caller already held it (then it is renewed). A fresh
        claim is refused (429) while ``agent`` holds ``max_claims`` live claims (0: no limit)."""
        keys = [task_key(task_id), claim_key(task_id), LEASES, EXPIRED]
        args: list[Value] = [task_id, agent, self.ttl_ms, _now_ms(), max_claims, PREFIX]
        reply = await self._claim(keys=keys, args=args)
        outcome = self._check(task_id, reply, agent)
        return await self.get(task_id), outcome == "ok"

    async def renew(self, task_id: str, agent: str, explicit: bool = True) -> BoardTask:
        keys = [task_key(task_id), claim_key(task_id), LEASES]
        reply = await self._renew(keys=keys, args=[task_id, agent, self.ttl_ms, _now_ms(), int(explicit)])
        self._check(task_id, reply, agent)
        return await self.get(task_id)

    async def release(self, task_id: str, agent: str, force: bool = False) -> BoardTask:
        await self._finish_call(task_id, agent, done=False, result="", force=force)
        return await self.get(task_id)

    async def done(self, task_id: str, agent: str, result: str = "", force: bool = False) -> BoardTask:
        await self._finish_call(task_id, agent, done=True, result=result, force=force)
        return await self.get(task_id)

    async def _finish_call(self, task_id: str, agent: str, done: bool, result: str, force: bool) -> None:
        keys = [task_key(task_id), claim_key(task_id), LEASES]
        args: list[Value] = [task_id, agent, _now_ms(), int(done), result, int(force)]
        self._check(task_id, await self._finish(keys=keys, args=args), agent)

    # -- leases -----------------------------------------------------------------------------

    async def sweep(self, limit: int = 100) -> int:
        """Move lapsed claims to the announcement list; returns how many."""
        return int(await self._sweep(keys=[LEASES, EXPIRED], args=[_now_ms(), PREFIX, limit]))

    async def pop_expired(self, count: int = 50) -> builtins.list[dict[str, Any]]:
        out = []
        for _ in range(count):
            raw = await self.redis.lpop(EXPIRED)
            if raw is None:
                break
            out.append(json.loads(raw))
        return out

    async def expiring(self, within_s: float) -> builtins.list[tuple[str, str, float]]:
        """(task, holder, renewed_at) of live claims whose lease ends within ``within_s``."""
        ids = await self.redis.zrangebyscore(LEASES, "-inf", _now_ms() + int(within_s * 1000))
        if not ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for task_id in ids:
                pipe.get(claim_key(task_id))
                pipe.hget(task_key(task_id), "renewed_at")
            raws = await pipe.execute()
        return [
            (task_id, holder, _seconds(renewed) or 0.0)
            for task_id, holder, renewed in zip(ids, raws[::2], raws[1::2], strict=True)
            if holder
        ]

    # -- leads ------------------------------------------------------------------------------

    async def add_lead(self, name: str) -> None:
        await self.redis.sadd(LEADS, name)

    async def remove_lead(self, name: str) -> None:
        await self.redis.srem(LEADS, name)

    async def leads(self) -> set[str]:
        return set(await self.redis.smembers(LEADS))
