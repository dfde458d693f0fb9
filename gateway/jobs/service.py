"""What the REST routes and the MCP tools share: submission checks, worker calls, views.

Identity is always the caller's principal: the submitter of a job, the consumer that runs it
(``<worker principal>/<instance>``) and who may cancel it are derived from the token, never from a body.
The task of a job is always the one its kernel's path names. Who may read a job is ``access.py``; what
follows a final state (evidence, notice) is ``outcomes.py``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import RedisError

from gateway import keys as gateway_keys
from gateway.cancellation import nap, rounds
from gateway.client.jobs.kernel_paths import task_of_kernel
from gateway.client.jobs.models import (
    Assignment,
    CounterexampleJob,
    FinishReply,
    FinishRequest,
    HeartbeatReply,
    HeartbeatRequest,
    Job,
    JobRequest,
    TakeRequest,
    new_job_id,
)
from gateway.client.jobs.pools import NodeConfig, PoolConfig
from gateway.context import GatewayContext
from gateway.errors import JobError, RuleViolation
from gateway.forge.gate.evidence import derive_evidence
from gateway.jobs.access import JobAccess
from gateway.jobs.admission import admit
from gateway.jobs.outcomes import JobOutcomes
from gateway.jobs.queue import JobQueue
from gateway.jobs.refs import ForgeRefs
from gateway.jobs.settings import JobsSettings
from gateway.jobs.workers import PoolWorkers
from gateway.principals import Principal, PrincipalKind
from gateway.services import EVIDENCE_LEDGER

log = logging.getLogger("kswarm.jobs")
HEAL_MAX_QUEUED = 100_000


class JobService:
    def __init__(self, ctx: GatewayContext, settings: JobsSettings, pools: list[PoolConfig]) -> None:
        self.ctx = ctx
        self.settings = settings
        self.pools = {p.name: p for p in pools}
        device_pools = frozenset(p.name for p in pools if p.on_device)
        self.queue = JobQueue(
            ctx.redis,
            log_max_bytes=settings.log_max_bytes,
            recent_kept=settings.recent_kept,
            device_pools=device_pools,
        )
        ledger = ctx.services.find(EVIDENCE_LEDGER)
        if ledger is not None:  # how the gate reads a pass recorded before evidence levels existed
            ledger.device_pools = device_pools
        self.refs = ForgeRefs(ctx, settings.default_repo)
        self.outcomes = JobOutcomes(ctx, self.queue)
        self.workers = PoolWorkers(ctx, self.queue, settings.claim_idle_s)

    def pool(self, name: str) -> PoolConfig:
        try:
            return self.pools[name]
        except KeyError:
            raise JobError(f"unknown pool {name!r}; pools: {', '.join(sorted(self.pools))}", 404) from None

    @staticmethod
    def node(pool: PoolConfig, name: str | None) -> NodeConfig:
        """The node of ``pool`` a worker names (None: the first); a 400 naming the nodes otherwise."""
        try:
            return pool.node(name)
        except ValueError as exc:
            raise JobError(str(exc), 400) from None

    # -- agents and operators -----------------------------------------------------------------

    async def submit(
        self,
        principal: Principal,
        request: JobRequest,
        counterexample: CounterexampleJob | None = None,
        reverify: str | None = None,
    ) -> Job:
        """Queue ``request`` for ``principal``. ``counterexample`` (the counterexample service only, never
        a request field) makes it a ``counterexample`` job carrying that payload; the pool admits it as
        the verify job it is besides. ``reverify``: only the heal (gateway/counterexamples/heal.py) passes
        it, as the gate principal; no route can (it is no request field)."""
        heal = reverify is not None and principal.kind == PrincipalKind.gate
        if principal.kind not in (PrincipalKind.agent, PrincipalKind.operator) and not heal:
            raise JobError(f"{principal.kind.value} principals do not submit jobs", 403)
        task = task_of_kernel(request.kernel)  # the only task this file can be verified as
        pool = self.pool(request.pool)
        devices, timeout = admit(pool, request)
        repo = await self.refs.repo(request.repo)
        if pool.tasks_dir is not None:  # the pool's own task dir wins over the repo's main
            if not (pool.task_root() / task / "task.py").is_file():
                raise JobError(f"pool {pool.name} has no task {task!r} (from {request.kernel})", 404)
        else:  # where the worker will load it from: the repo's protected main, else the catalogue
            await self.refs.task(repo, task)
        ref = request.ref
        priority = "normal"
        if request.reproduce_pr is not None:
            pr = await self.refs.pull(repo, request.reproduce_pr)
            if pr.author == principal.name:
                raise RuleViolation(
                    "reproduction_by_reviewer", "a PR's author does not reproduce their own PR"
                )
            if "ref" not in request.model_fields_set:
                ref = pr.head_sha or ref
            if pool.rules.reproduction_priority:
                priority = "reproduction"
        sha, has_kernel = await self.refs.resolve(repo, ref, request.kernel)
        if has_kernel is False:
            raise JobError(f"no file {request.kernel} at {sha[:12]} in {repo}", 404)
        job = Job(
            id=new_job_id(),
            submitter=principal.name,
            repo=repo,
            ref=ref,
            sha=sha,
            task=task,
            kernel=request.kernel,
            entry=request.entry,
            pool=pool.name,
            nodes=request.nodes,
            devices=devices,
            kind="counterexample" if counterexample is not None else request.kind,
            counterexample=counterexample,
            timeout_s=timeout,
            priority=priority,
            reproduce_pr=request.reproduce_pr,
            max_attempts=pool.max_attempts,
            submitted=time.time(),
            reverify=reverify,
        )
        # Evidence first: a worker may take and finish the job before submit() returns.
        await self.outcomes.submitted(job)
        try:
            # A heal queues one job per accepted kernel: its own fair lane, not an agent's queue limit.
            limit = HEAL_MAX_QUEUED if heal else pool.rules.max_queued_per_agent
            queued = await self.queue.submit(job, limit)
        except BaseException:
            await self.outcomes.refused(job)
            raise
        await self.announce(queued)
        await self.workers.notify_waiting(queued)
        return queued

    async def announce(self, job: Job) -> None:
        """A job changed state: one ``type=job`` entry on the global event stream (SSE, the UI's Jobs
        panel refreshes on it). Best effort: the job's own record is what counts."""
        fields = {
            "type": "job",
            "job": job.id,
            "pool": job.pool,
            "state": str(job.state),
            "agent": job.submitter,
            "task": job.task,
            "verdict": job.verdict or "",
            "ts": repr(time.time()),
        }
        try:
            await self.ctx.redis.xadd(
                gateway_keys.EVENTS, fields, maxlen=self.ctx.settings.events_maxlen, approximate=True
            )
        except RedisError:
            pass

    async def get(self, job_id: str) -> Job:
        job = await self.queue.get(job_id)
        if job is None:
            raise JobError(f"no job {job_id}", 404)
        return job

    async def read(self, principal: Principal, job_id: str) -> Job:
        """A job the caller may read (docs/jobs.md "Who sees a job"); others get the missing-job 404."""
        job = await self.queue.get(job_id)
        if job is None or not await JobAccess(self.ctx).can_read(principal, job):
            raise JobError(f"no job {job_id}", 404)
        return job

    async def visible(self, principal: Principal, jobs: list[Job]) -> list[Job]:
        return await JobAccess(self.ctx).visible(principal, jobs)

    async def logs(self, principal: Principal, job_id: str, tail: int | None = None) -> str:
        await self.read(principal, job_id)
        return await self.queue.logs(job_id, tail)

    async def cancel(self, principal: Principal, job_id: str) -> Job:
        job = await self.read(principal, job_id)
        if principal.name != job.submitter and principal.kind != PrincipalKind.operator:
            raise JobError(f"only {job.submitter} (the submitter) or an operator cancels {job_id}", 403)
        await self.queue.cancel(job_id)
        cancelled = await self.get(job_id)
        if cancelled.terminal:
            await self.outcomes.deliver(job_id)
        await self.announce(cancelled)
        return cancelled

    async def pools_view(self, principal: Principal) -> list[dict[str, Any]]:
        out = []
        access = JobAccess(self.ctx)
        for pool in self.pools.values():
            depth = await self.queue.depth(pool.name)
            for listing in ("running_jobs", "recent"):
                jobs = [Job.model_validate(j) for j in depth[listing]]
                depth[listing] = [j.public(with_result=False) for j in await access.visible(principal, jobs)]
            workers = await self.workers.view(pool)
            config = pool.model_dump(mode="json", exclude={"harness_command"})
            out.append({**depth, **workers, "config": config})
        return out

    # -- workers ----------------------------------------------------------------------------

    @staticmethod
    def consumer(principal: Principal, instance: str) -> str:
        if principal.kind != PrincipalKind.worker:
            raise JobError("only worker principals run jobs", 403)
        return f"{principal.name}/{instance}"

    async def take(
        self,
        principal: Principal,
        pool_name: str,
        body: TakeRequest,
        gone: Callable[[], Awaitable[bool]] | None = None,
    ) -> Assignment | None:
        """The next job for this worker, waiting up to ``body.wait_s``; ``gone()`` says the worker hung
        up, so that a dead worker's long-poll never takes a job it cannot run (it would sit until
        reclaimed)."""
        consumer = self.consumer(principal, body.instance)
        pool = self.pool(pool_name)
        await self.workers.check_serves(principal, pool.name)
        # A node holds jobs to its capacity, unless the executor allocates the devices itself.
        node = None if pool.executor.allocates_devices else self.node(pool, body.node)
        capacity = len(node.devices) if node is not None else None
        deadline = time.monotonic() + body.wait_s
        while True:
            lease_ms = int(self.settings.claim_idle_s * 1000)
            holder = await self.queue.lease_node(pool.name, body.node, consumer, lease_ms)
            if holder is not None:
                raise JobError(f"node {body.node} of pool {pool.name} is served by {holder}", 409)
            if gone is not None and await gone():
                return None
            bell = await self.queue.bell_id(pool.name)
            taken = await self.queue.take(
                pool.name,
                consumer,
                body.node,
                body.free_devices,
                pool.rules.max_running_per_agent,
                capacity,
                body.free_ids,
            )
            if taken is not None:
                await self.announce(taken.job)
                return Assignment(job=taken.job, attempt=taken.attempt, consumer=consumer)
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            await self.queue.wait_bell(pool.name, bell, min(left, self.settings.claim_idle_s / 3))

    async def heartbeat(self, principal: Principal, job_id: str, body: HeartbeatRequest) -> HeartbeatReply:
        consumer = self.consumer(principal, body.instance)
        ok, cancel = await self.queue.heartbeat(job_id, consumer, body.attempt, body.log)
        if ok:
            job = await self.queue.get(job_id)
            if job is not None and job.node:
                lease_ms = int(self.settings.claim_idle_s * 1000)
                await self.queue.lease_node(job.pool, job.node, consumer, lease_ms)
        return HeartbeatReply(ok=ok, cancel=cancel)

    async def finish(self, principal: Principal, job_id: str, body: FinishRequest) -> FinishReply:
        consumer = self.consumer(principal, body.instance)
        evidence = await self.evidence_of(job_id, body)
        recorded, state = await self.queue.finish(
            job_id,
            consumer,
            body.attempt,
            body.state,
            verdict=body.verdict,
            error=body.error,
            exit_code=body.exit_code,
            result=body.result,
            evidence=evidence,
            log=body.log,
        )
        if recorded and state:
            job = await self.queue.get(job_id)
            if job is not None:
                self.ctx.metrics.jobs_finished.labels(pool=job.pool, state=state).inc()
                await self.outcomes.deliver(job_id)
                await self.announce(job)
        return FinishReply(recorded=recorded, state=state or "error")

    async def evidence_of(self, job_id: str, body: FinishRequest) -> str | None:
        """The level the job's result proves, derived here from the pool the job was submitted to (its
        identity, fixed at submission; a pool no longer configured is not a device) and the reported
        state and verdict: the worker's record may only lower it (``derive_evidence``)."""
        job = await self.queue.get(job_id)
        if job is None:
            return None
        pool = self.pools.get(job.pool)
        on_device = pool is not None and pool.on_device
        return derive_evidence(body.state.value, body.verdict, body.result, on_device)

    async def refresh_metrics(self) -> None:
        """Scrape-time gauges: jobs queued and running, queue depth and dead letters per pool."""
        m = self.ctx.metrics
        for pool in self.pools.values():
            depth = await self.queue.depth(pool.name)
            m.jobs.labels(pool=pool.name, state="queued").set(depth["queued"])
            m.jobs.labels(pool=pool.name, state="running").set(depth["running"])
            m.queue_depth.labels(pool=pool.name).set(depth["queued"])
            m.dead_letters.labels(pool=pool.name).set(depth["dead_letters"])

    async def reclaim_loop(self) -> None:
        """Requeue or dead-letter the jobs of silent workers, in every pool, and deliver the outcomes
        a crash left undelivered, forever."""
        idle_ms = int(self.settings.claim_idle_s * 1000)
        for _ in rounds():
            try:
                await self.outcomes.deliver_pending()
            except Exception:
                log.exception("delivering job outcomes failed")
            for pool in self.pools:
                try:
                    for action in await self.queue.reclaim(pool, idle_ms):
                        job = await self.queue.get(action.job_id)
                        if job is not None:
                            if job.terminal:  # dead-lettered or cancelled: its evidence is final
                                await self.outcomes.deliver(job.id)
                            await self.announce(job)
                except Exception:  # a bad pass must not stop reclaiming; the next one retries
                    log.exception("reclaim of pool %s failed", pool)
            await nap(self.settings.reclaim_every_s)
