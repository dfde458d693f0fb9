"""The job queue on Redis Streams: submit, fair take, heartbeat, finish, reclaim, dead letters, cancel.

Each pool has one stream per (priority, submitter) lane, all with the consumer group ``workers``
(layout in ``scripts.py``). Delivery is at-least-once: a job's entry stays pending under the consumer
that took it until its final state is recorded. A healthy worker's heartbeat re-claims its own entry
(resetting its idle time); ``reclaim`` finds entries idle longer than ``claim_idle`` with
``gateway.redis_compat.xautoclaim`` (a dead or hung worker), and requeues the job at the front of its
submitter's line, or dead-letters it with the reason once it has used up ``max_attempts``. Results are
recorded once per job: ``finish`` applies only to the live attempt of the consumer that runs it.
"""

from __future__ import annotations

import builtins
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gateway.client.jobs.models import Job, JobState
from gateway.errors import RuleViolation
from gateway.forge.gate.evidence import implied_evidence
from gateway.jobs import scripts
from gateway.jobs.fairness import LaneHead, choose_lane
from gateway.redis_compat import xautoclaim
from gateway.redis_facade import StrRedis

PREFIX = "ks:jobs:"
GROUP = "workers"
_SPEC_FIELDS = (
    "id submitter repo ref sha task kernel entry pool nodes devices kind timeout_s priority reproduce_pr"
    " max_attempts submitted counterexample reverify"
).split()


@dataclass(frozen=True)
class TakeResult:
    job: Job
    attempt: int


@dataclass(frozen=True)
class ReclaimAction:
    action: str  # requeued, dead, cancelled, dropped, gone, deleted
    job_id: str
    lane: str


def _none(value: str | None) -> str | None:
    return value if value not in (None, "") else None


def decode_job(raw: dict[str, str], device_pools: frozenset[str] = frozenset()) -> Job:
    spec = json.loads(raw["spec"])
    allocated = raw.get("allocated") or ""
    job = Job(
        **spec,
        state=JobState(raw.get("state") or "queued"),
        attempts=int(raw.get("attempts") or 0),
        worker=_none(raw.get("worker")),
        node=_none(raw.get("node")),
        allocated=[d for d in allocated.split(",") if d],
        started=float(raw["started"]) if raw.get("started") else None,
        finished=float(raw["finished"]) if raw.get("finished") else None,
        verdict=_none(raw.get("verdict")),
        error=_none(raw.get("error")),
        exit_code=int(raw["exit_code"]) if raw.get("exit_code") else None,
        cancel_requested=raw.get("cancel_requested") == "1",
        result=json.loads(raw["result"]) if raw.get("result") else None,
        evidence=_none(raw.get("evidence")),
    )
    if job.evidence is None and job.terminal:
        # Finished before evidence levels existed (or ended by the queue: dead letter, cancellation):
        # the level its pool and verdict imply.
        job.evidence = implied_evidence(job.state.value, job.verdict, job.pool in device_pools)
    return job


def _flat(mapping: dict[str, str]) -> list[str]:
    return [x for pair in mapping.items() for x in pair]


class JobQueue:
    """All queue operations; one instance per gateway (or per test), holding no job state itself."""

    def __init__(
        self,
        redis: StrRedis,
        prefix: str = PREFIX,
        log_max_bytes: int = 1 << 20,
        recent_kept: int = 200,
        device_pools: frozenset[str] = frozenset(),
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.device_pools = device_pools  # how a job finished without a level reads (decode_job)
        self.log_max_bytes = log_max_bytes
        self.recent_kept = recent_kept
        self._submit = redis.register_script(scripts.SUBMIT)
        self._peek = redis.register_script(scripts.PEEK)
        self._take = redis.register_script(scripts.TAKE)
        self._heartbeat = redis.register_script(scripts.HEARTBEAT)
        self._finish = redis.register_script(scripts.FINISH)
        self._requeue = redis.register_script(scripts.REQUEUE)
        self._cancel = redis.register_script(scripts.CANCEL)
        self._lease = redis.register_script(scripts.LEASE)

    def key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    # -- submitting and reading ---------------------------------------------------------------

    async def submit(self, job: Job, max_queued: int) -> Job:
        """Queue a job; RuleViolation ``max_queued_per_agent`` when its submitter has enough waiting."""
        lane = f"{0 if job.priority == 'reproduction' else 1}:{job.submitter}"
        spec = job.model_dump_json(include=set(_SPEC_FIELDS))
        stored = {
            "spec": spec,
            "pool": job.pool,
            "submitter": job.submitter,
            "devices": str(job.devices),
            "max_attempts": str(job.max_attempts),
        }
        flat = _flat(stored)
        reply = await self._submit(
            args=[
                self.prefix,
                job.pool,
                lane,
                lane[0],
                job.submitter,
                job.id,
                job.devices,
                max_queued,
                repr(job.submitted),
                len(flat),
                *flat,
            ]
        )
        if reply[0] == "refused":
            raise RuleViolation(
                "max_queued_per_agent",
                f"pool {job.pool} keeps at most {max_queued} waiting jobs per agent; "
                f"{job.submitter} has {reply[1]} (cancel some or wait)",
            )
        if reply[0] == "exists":
            raise ValueError(f"job id {job.id} is taken")
        stored_job = await self.get(job.id)
        assert stored_job is not None
        return stored_job

    async def get(self, job_id: str) -> Job | None:
        raw = await self.redis.hgetall(self.key("job", job_id))
        return decode_job(raw, self.device_pools) if raw else None

    async def get_many(self, ids: Iterable[str]) -> list[Job]:
        ids = list(ids)
        if not ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hgetall(self.key("job", job_id))
            raws = await pipe.execute()
        return [decode_job(r, self.device_pools) for r in raws if r]

    async def list(
        self,
        pool: str | None = None,
        state: str | None = None,
        submitter: str | None = None,
        limit: int = 50,
    ) -> list[Job]:
        """Newest first; scans at most 20 x ``limit`` recent submissions when filtering."""
        ids = await self.redis.zrevrange(self.key("all"), 0, max(limit * 20, 200) - 1)
        out: list[Job] = []
        for job in await self.get_many(ids):
            if (pool and job.pool != pool) or (state and job.state != state):
                continue
            if submitter and job.submitter != submitter:
                continue
            out.append(job)
            if len(out) >= limit:
                break
        return out

    async def logs(self, job_id: str, tail: int | None = None) -> str:
        key = self.key("logs", job_id)
        # Raw bytes: the log's cap and a tail cut by bytes may split a UTF-8 character.
        if tail:
            raw = await self.redis.execute_command("GETRANGE", key, -tail, -1, NEVER_DECODE=True)
        else:
            raw = await self.redis.execute_command("GET", key, NEVER_DECODE=True)
        return (raw or b"").decode(errors="replace")

    # -- workers ----------------------------------------------------------------------------

    async def lease_node(self, pool: str, node: str, consumer: str, ttl_ms: int) -> str | None:
        """Hold the node for ``consumer``; returns None, or the other consumer that holds it."""
        reply = await self._lease(keys=[self.key("lease", pool, node)], args=[consumer, ttl_ms])
        return None if reply == 1 else str(reply)

    async def peek(self, pool: str) -> builtins.list[LaneHead]:
        rows = await self._peek(args=[self.prefix, pool])
        return [
            LaneHead(
                lane=r[0],
                priority=int(float(r[1])),
                submitter=r[0].partition(":")[2],
                entry=r[2],
                job_id=r[3],
                devices=int(r[4]),
                running=int(r[5]),
                served=int(float(r[6])),
            )
            for r in rows
        ]

    async def take(
        self,
        pool: str,
        consumer: str,
        node: str,
        free_devices: int,
        max_running: int,
        node_capacity: int | None = None,
        free_ids: builtins.list[str] | None = None,
    ) -> TakeResult | None:
        """The next job by the fairness rule that fits ``free_devices``, now marked running, or None."""
        for _ in range(8):  # another worker may take the same head between peek and take
            head = choose_lane(await self.peek(pool), free_devices, max_running, node_capacity)
            if head is None:
                return None
            allocated = ",".join((free_ids or [])[: head.devices])
            reply = await self._take(
                args=[
                    self.prefix,
                    pool,
                    head.lane,
                    head.entry,
                    consumer,
                    max_running,
                    repr(time.time()),
                    node,
                    allocated,
                ]
            )
            if reply[0] == "ok":
                job = await self.get(reply[1])
                assert job is not None
                return TakeResult(job=job, attempt=int(reply[2]))
        return None

    async def bell_id(self, pool: str) -> str:
        last = await self.redis.xrevrange(self.key("bell", pool), "+", "-", count=1)
        return last[0][0] if last else "0-0"

    async def wait_bell(self, pool: str, after: str, timeout_s: float) -> None:
        """Block until something is submitted, requeued or finished in the pool after ``after``."""
        if timeout_s <= 0:
            return
        await self.redis.xread({self.key("bell", pool): after}, count=1, block=max(1, int(timeout_s * 1000)))

    async def heartbeat(self, job_id: str, consumer: str, attempt: int, log: str = "") -> tuple[bool, bool]:
        """(still yours, cancel requested); refreshes the entry's idle time and appends ``log``."""
        reply = await self._heartbeat(args=[self.prefix, job_id, consumer, attempt, log, self.log_max_bytes])
        return reply[0] == "ok", reply[0] == "ok" and reply[1] == "1"

    async def finish(
        self,
        job_id: str,
        consumer: str,
        attempt: int,
        state: JobState,
        *,
        verdict: str | None = None,
        error: str | None = None,
        exit_code: int | None = None,
        result: dict[str, Any] | None = None,
        evidence: str | None = None,
        log: str = "",
    ) -> tuple[bool, str]:
        """Record the final state of a live attempt: (True, state) once; (False, current state) after.
        ``evidence`` is the gateway's own level for it (``JobService.finish``), never the worker's."""
        extra: dict[str, str] = {}
        if verdict is not None:
            extra["verdict"] = verdict
        if evidence is not None:
            extra["evidence"] = evidence
        if error is not None:
            extra["error"] = error[:4000]
        if exit_code is not None:
            extra["exit_code"] = str(exit_code)
        if result is not None:
            extra["result"] = json.dumps(result)
        flat = _flat(extra)
        reply = await self._finish(
            args=[
                self.prefix,
                job_id,
                consumer,
                attempt,
                state.value,
                repr(time.time()),
                log,
                self.log_max_bytes,
                self.recent_kept,
                len(flat),
                *flat,
            ]
        )
        return reply[0] == "ok", reply[1]

    async def unreported(self, older_than_s: float = 0.0, limit: int = 100) -> builtins.list[str]:
        """Finished jobs whose evidence and notice are not delivered yet, oldest first; only those
        finished at least ``older_than_s`` ago (younger ones are being reported right now)."""
        cutoff = time.time() - older_than_s
        return list(await self.redis.zrangebyscore(self.key("unreported"), "-inf", cutoff, 0, limit))

    async def mark_reported(self, job_id: str) -> None:
        await self.redis.zrem(self.key("unreported"), job_id)

    async def cancel(self, job_id: str) -> str:
        """cancelled (was queued), cancelling (running: its worker stops it), final or missing."""
        reply = await self._cancel(args=[self.prefix, job_id, repr(time.time()), self.recent_kept])
        return reply[0]

    async def reclaim(
        self, pool: str, min_idle_ms: int, claimer: str = "reclaimer"
    ) -> builtins.list[ReclaimAction]:
        """Requeue or dead-letter the jobs of consumers silent for ``min_idle_ms``."""
        actions: list[ReclaimAction] = []
        for lane in await self.redis.zrange(self.key("lanes", pool), 0, -1):
            stream = self.key("lane", pool, lane)
            if not await self.redis.exists(stream):
                continue
            cursor = "0-0"
            while True:
                cursor, entries, deleted = await xautoclaim(
                    self.redis, stream, GROUP, claimer, min_idle_ms, start_id=cursor, count=50
                )
                actions += [ReclaimAction("deleted", entry_id, lane) for entry_id in deleted]
                for entry_id, _ in entries:
                    reply = await self._requeue(
                        args=[
                            self.prefix,
                            pool,
                            lane,
                            entry_id,
                            repr(time.time()),
                            self.recent_kept,
                            self.log_max_bytes,
                        ]
                    )
                    actions.append(ReclaimAction(reply[0], reply[1], lane))
                if cursor == "0-0":
                    break
        return actions

    async def live_workers(self, pool: str) -> builtins.list[dict[str, Any]]:
        """The workers serving ``pool`` now: one per node lease (a worker renews its node's lease on
        every take and heartbeat; a dead worker's lease lapses after ``claim_idle_s``)."""
        out: builtins.list[dict[str, Any]] = []
        async for key in self.redis.scan_iter(match=self.key("lease", pool, "*"), count=100):
            node = key.removeprefix(self.key("lease", pool, ""))
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.get(key)
                pipe.pttl(key)
                consumer, ttl_ms = await pipe.execute()
            if consumer:
                out.append({"node": node, "worker": consumer, "lease_left_s": max(0, ttl_ms) / 1000})
        return sorted(out, key=lambda w: w["node"])

    async def release_lease(self, pool: str, node: str) -> str | None:
        """Drop the node's lease (its worker is known dead); returns who held it."""
        key = self.key("lease", pool, node)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(key)
            pipe.delete(key)
            holder, _ = await pipe.execute()
        return holder

    async def bind_worker(self, principal: str, pool: str) -> None:
        """``principal`` (a pool's worker principal) may serve ``pool`` only."""
        await self.redis.set(self.key("worker-pool", principal), pool)

    async def bound_pool(self, principal: str) -> str | None:
        return await self.redis.get(self.key("worker-pool", principal))

    # -- views ------------------------------------------------------------------------------

    async def dead_letters(self, pool: str, count: int = 50) -> builtins.list[dict[str, str]]:
        rows = await self.redis.xrevrange(self.key("dead", pool), "+", "-", count=count)
        return [{"id": entry_id, **fields} for entry_id, fields in rows]

    async def depth(self, pool: str) -> dict[str, Any]:
        queued = {k: int(v) for k, v in (await self.redis.hgetall(self.key("queued", pool))).items()}
        running = {k: int(v) for k, v in (await self.redis.hgetall(self.key("running", pool))).items()}
        active_ids = await self.redis.zrange(self.key("active", pool), 0, -1)
        recent_ids = await self.redis.lrange(self.key("recent", pool), 0, 19)
        return {
            "pool": pool,
            "queued": sum(queued.values()),
            "running": sum(running.values()),
            "queued_by_agent": queued,
            "running_by_agent": running,
            "running_jobs": [j.public(with_result=False) for j in await self.get_many(active_ids)],
            "recent": [j.public(with_result=False) for j in await self.get_many(recent_ids)],
            "dead_letters": await self.redis.xlen(self.key("dead", pool)),
        }
