"""Counterexample records in Redis (``ks:cx:*``): one JSON string per record, an index per repo and the
set of each finder's pending ones (what the budget counts).

| key | type | content |
|---|---|---|
| ``ks:cx:<id>`` | string | the ``Counterexample`` as JSON |
| ``ks:cx:ids`` | sorted set | every id, scored by creation time |
| ``ks:cx:pending:<finder>`` | set | the finder's pending ids |
| ``ks:cx:job:<job id>`` | string | the counterexample a confirming job judges |
| ``ks:cx:lock:<id>`` | string | held while a job's outcome is applied (one applier at a time) |
"""

from __future__ import annotations

import secrets
import time

from gateway.counterexamples.models import Counterexample
from gateway.redis_facade import StrRedis
from kswarm_contracts.counterexample import CounterexampleStatus

PREFIX = "ks:cx:"
IDS = f"{PREFIX}ids"
LIST_MAX = 500


def new_counterexample_id() -> str:
    """``cx`` + milliseconds in hex + 3 random bytes (sortable by submission time)."""
    return f"cx{int(time.time() * 1000):x}{secrets.token_hex(3)}"


def record_key(cx_id: str) -> str:
    return f"{PREFIX}{cx_id}"


def pending_key(finder: str) -> str:
    return f"{PREFIX}pending:{finder}"


def job_key(job_id: str) -> str:
    return f"{PREFIX}job:{job_id}"


class CounterexampleStore:
    def __init__(self, redis: StrRedis) -> None:
        self.redis = redis

    async def reserve(self, finder: str, cx_id: str, limit: int) -> bool:
        """Count ``cx_id`` among ``finder``'s pending ones if fewer than ``limit`` are; else False."""
        key = pending_key(finder)
        await self.redis.sadd(key, cx_id)
        # Added, then counted: of two racing submissions at the limit, neither slips through.
        if len(await self.redis.smembers(key)) > limit:
            await self.redis.srem(key, cx_id)
            return False
        return True

    async def release(self, finder: str, cx_id: str) -> None:
        await self.redis.srem(pending_key(finder), cx_id)

    async def pending(self, finder: str) -> int:
        return len(await self.redis.smembers(pending_key(finder)))

    async def save(self, cx: Counterexample) -> None:
        await self.redis.set(record_key(cx.id), cx.model_dump_json())
        await self.redis.zadd(IDS, {cx.id: cx.created_at})
        if cx.job:
            await self.redis.set(job_key(cx.job), cx.id)
        if cx.status != "pending":
            await self.release(cx.finder, cx.id)

    async def forget(self, cx: Counterexample) -> None:
        """Drop a record whose job was never queued (the job runner refused it)."""
        await self.release(cx.finder, cx.id)
        await self.redis.delete(record_key(cx.id))
        await self.redis.zrem(IDS, cx.id)

    async def get(self, cx_id: str) -> Counterexample | None:
        raw = await self.redis.get(record_key(cx_id))
        return Counterexample.model_validate_json(raw) if raw else None

    async def of_job(self, job_id: str) -> Counterexample | None:
        cx_id = await self.redis.get(job_key(job_id))
        return await self.get(cx_id) if cx_id else None

    async def list(
        self,
        repo: str | None = None,
        task: str | None = None,
        status: CounterexampleStatus | None = None,
        limit: int = 100,
    ) -> list[Counterexample]:
        """Newest first, filtered."""
        out: list[Counterexample] = []
        for cx_id in await self.redis.zrevrange(IDS, 0, LIST_MAX - 1):
            cx = await self.get(cx_id)
            if cx is None or (repo and cx.repo != repo) or (task and cx.task != task):
                continue
            if status and cx.status != status:
                continue
            out.append(cx)
            if len(out) >= limit:
                break
        return out

    async def lock(self, cx_id: str, ttl_s: int = 120) -> bool:
        return bool(await self.redis.set(f"{PREFIX}lock:{cx_id}", "1", nx=True, ex=ttl_s))

    async def unlock(self, cx_id: str) -> None:
        await self.redis.delete(f"{PREFIX}lock:{cx_id}")
