"""A pool's workers, as the gateway sees them: who may serve it, who serves it now, and what a job
submitted to a pool with nobody serving it is told.

- **One worker principal per pool** (``worker-<pool>``, ``gateway.client.jobs.pools.worker_principal``),
  provisioned by an operator (``POST /api/jobs/pools/{pool}/workers``: ``kswarm up -f`` for the workers
  it runs, ``kswarm worker token POOL`` for one started elsewhere). It is bound to its pool: its token
  takes jobs from that pool only, so a token handed to a CPU box cannot drain a GPU pool. Worker
  principals made otherwise (``kswarm agent add w --kind worker``) are not bound and serve any pool.
- **Live workers** are the node leases (``ks:jobs:lease:<pool>:<node>``): a worker renews its node's
  lease on every take and heartbeat, so one that died drops out after ``claim_idle_s``.
- **No worker**: a job submitted while a pool has none gets a DM from ``jobs`` saying it waits; one per
  submitter and pool every ``NOTICE_EVERY_S`` (a burst of submissions gets one notice, not one each).
"""

from __future__ import annotations

import logging
from typing import Any

from redis.exceptions import RedisError

from gateway.client.jobs.models import Job, WorkerToken
from gateway.client.jobs.pools import PoolConfig, worker_principal
from gateway.context import GatewayContext
from gateway.errors import GatewayError, JobError
from gateway.jobs.queue import JobQueue
from gateway.principals import Principal, PrincipalKind

log = logging.getLogger("kswarm.jobs")
NOTICE_SENDER = "jobs"  # a gate-kind principal (no token is ever handed out) that speaks for the queue
NOTICE_EVERY_S = 60  # at most one waiting notice per submitter and pool in this time (bursts; short, so
# a pool that had a worker and lost it again is told about soon)


class PoolWorkers:
    def __init__(self, ctx: GatewayContext, queue: JobQueue, claim_idle_s: float) -> None:
        self.ctx = ctx
        self.queue = queue
        self.claim_idle_s = claim_idle_s
        self._sender: Principal | None = None

    async def provision(self, pool: PoolConfig) -> WorkerToken:
        """The pool's worker principal (created once, bound to the pool) and a new token for it."""
        name = worker_principal(pool.name)
        principal, token = await self.ctx.principals.ensure(name, PrincipalKind.worker)
        if principal.kind != PrincipalKind.worker:
            raise JobError(f"{name} exists as a principal of kind {principal.kind.value}, not worker", 409)
        if principal.disabled:
            raise JobError(f"{name} is disabled; enable it first", 409)
        await self.queue.bind_worker(name, pool.name)
        token = token or await self.ctx.principals.issue_token(name)
        return WorkerToken(pool=pool.name, principal=name, token=token)

    async def check_serves(self, principal: Principal, pool: str) -> None:
        """A pool's bound worker principal takes jobs from that pool only (403 otherwise)."""
        bound = await self.queue.bound_pool(principal.name)
        if bound is not None and bound != pool:
            raise JobError(f"{principal.name} serves pool {bound} only, not {pool}", 403)

    async def view(self, pool: PoolConfig) -> dict[str, Any]:
        """What the pools listing says about who serves ``pool`` (docs/jobs.md, "Workers")."""
        live = await self.queue.live_workers(pool.name)
        for worker in live:  # a lease is renewed on every take and heartbeat, for claim_idle_s
            worker["seen_s_ago"] = round(max(0.0, self.claim_idle_s - worker.pop("lease_left_s")), 1)
        return {
            "workers": live,
            "workers_expected": pool.workers,
            "no_worker": not live,
        }

    async def notify_waiting(self, job: Job) -> bool:
        """DM the submitter that ``job`` waits because nobody serves its pool; True if it was sent.

        Once per submitter and pool every ``NOTICE_EVERY_S``: the notice says the pool has nobody, which
        the next job's would repeat (and a burst of them would meet the sender's rate limit)."""
        once = self.queue.key("waiting-notice", job.pool, job.submitter)
        try:
            if await self.queue.live_workers(job.pool):
                return False
            if not await self.ctx.redis.set(once, job.id, nx=True, ex=NOTICE_EVERY_S):
                return False
            if self._sender is None:
                sender, _ = await self.ctx.principals.ensure(NOTICE_SENDER, PrincipalKind.gate)
                if sender.kind != PrincipalKind.gate:  # an agent took the name: never speak as it
                    log.warning("principal %s is a %s: no waiting notices", NOTICE_SENDER, sender.kind.value)
                    return False
                self._sender = sender
            text = (
                f"job {job.id} ({job.kernel} @ {job.sha[:10]}) is queued but waits for a worker: pool "
                f"{job.pool} has no live worker. It runs as soon as one takes it (an operator starts one "
                f"with `kswarm up -f` and workers: N, or `kswarm worker token {job.pool}`). Other jobs "
                f"you submit to {job.pool} in the next {NOTICE_EVERY_S} s wait the same way, without "
                "another notice."
            )
            await self.ctx.chat.post_dm(self._sender, job.submitter, text, dedupe=f"job-waits:{job.id}")
            return True
        except (RedisError, GatewayError) as exc:  # best effort: the job itself is queued either way
            log.warning("job %s: could not send the waiting notice: %s", job.id, exc)
            try:
                await self.ctx.redis.delete(once)  # the next job's notice may say it instead
            except RedisError:
                pass
            return False
