"""The overview: what the swarm is doing, in figures, each linked to the list it counts.

``OverviewBuilder.report()`` is the one computation behind both ``GET /api/monitor/overview`` and the
landing page (``/ui/overview``), so they cannot disagree; the queue chart's latest point comes from
``pool_depths()``, the same numbers. Every figure is read from its component's own state at the time of
the call (the task board, the forge and the gate's audit, the job runner's queue, heartbeats and the
supervisor's records, the LLM proxy's books); only "spent in the last hour" and the lifetime come from
the monitor's own history. A component that is not registered leaves its part ``None`` and says why in
``sources``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar
from urllib.parse import urlencode

from gateway.context import GatewayContext
from gateway.monitor import keys
from gateway.monitor.attention import AttentionBuilder
from gateway.monitor.overview_models import (
    AgentFigures,
    Figure,
    Overview,
    PoolFigures,
    PrFigures,
    SpendFigures,
    TaskFigures,
    ThroughputFigures,
)
from gateway.monitor.series import SeriesStore
from gateway.services import FORGE, JOB_SERVICE, LLM_USAGE, REVIEW_GATE, TASK_BOARD
from gateway.swarm.liveness import LivenessBook

log = logging.getLogger("kswarm.monitor")

HOUR_S = 3600.0
FAILED_STATES = ("failed", "error", "timeout")
JOBS_SCANNED = 5000  # newest submissions of the last day read for "failed in the last hour"
T = TypeVar("T")


def jobs_link(**filters: str) -> str:
    return "/ui/jobs" + (f"?{urlencode(filters)}" if filters else "")


class OverviewBuilder:
    def __init__(
        self, ctx: GatewayContext, series: SeriesStore, attention: AttentionBuilder, liveness: LivenessBook
    ) -> None:
        self.ctx = ctx
        self.series = series
        self.attention = attention
        self.liveness = liveness

    async def report(self) -> Overview:
        now = time.time()
        sources: dict[str, str] = {}

        async def part(name: str, compute: Callable[[], Awaitable[tuple[T | None, str]]]) -> T | None:
            try:
                value, state = await compute()
            except Exception as exc:  # one broken component must not hide the others
                log.exception("overview part %s failed", name)
                value, state = None, f"failed: {type(exc).__name__}: {exc}"
            sources[name] = state
            return value

        started = await self.started_at()
        prs = await part("prs", lambda: self.prs(now))
        sources["throughput"] = sources["prs"]  # kernels accepted are the PRs merged
        return Overview(
            computed_at=now,
            started_at=started,
            attention=await self.attention.report(),
            tasks=await part("tasks", self.tasks),
            prs=prs,
            pools=await part("jobs", lambda: self.pools(now)) or [],
            agents=await part("agents", lambda: self.agents(now)) or self.no_agents(),
            spend=await part("spend", lambda: self.spend(now)),
            throughput=self.throughput(prs, now, started),
            sources=sources,
        )

    async def started_at(self) -> float | None:
        """When the monitor first fed this swarm's history (``ks:mon:started``), if it has."""
        raw = await self.ctx.redis.get(keys.STARTED)
        return float(raw) if raw else None

    # -- tasks ------------------------------------------------------------------------------

    async def tasks(self) -> tuple[TaskFigures | None, str]:
        svc = self.ctx.services.find(TASK_BOARD)
        if svc is None:
            return None, "no task board registered"
        counts = {"open": 0, "claimed": 0, "done": 0}
        for task in await svc.board.list():
            counts[task.state] = counts.get(task.state, 0) + 1
        figures = {state: Figure(value=n, link=f"/ui/tasks?state={state}") for state, n in counts.items()}
        return TaskFigures(**figures), "ok"

    # -- PRs --------------------------------------------------------------------------------

    async def prs(self, now: float) -> tuple[PrFigures | None, str]:
        forge, gate = self.ctx.services.find(FORGE), self.ctx.services.find(REVIEW_GATE)
        if forge is None or gate is None:
            return None, "no forge registered"
        waiting = blocked = merged = merged_recently = 0
        for repo in await forge.list_repos():
            for pr in await forge.list_prs(repo.org, repo.name, "all"):
                if pr.state == "open":
                    # The gate's last decision, as Attention reads it (deciding again is the gate's job).
                    audit = await gate.audit(pr.full_name, pr.number, 1)
                    reasons = (audit[-1] if audit else {}).get("reasons") or []
                    if any(r.get("blocking") for r in reasons):
                        blocked += 1
                    else:
                        waiting += 1
                elif pr.merged:
                    merged += 1
                    merged_recently += (pr.merged_at or 0) >= now - HOUR_S
        return (
            PrFigures(
                open=Figure(value=waiting + blocked, link="/ui/prs?state=open"),
                waiting=Figure(value=waiting, link="/ui/prs?state=open"),
                blocked=Figure(value=blocked, link="/ui/prs?state=open"),
                merged_last_hour=Figure(value=merged_recently, link="/ui/prs?state=closed"),
                merged=Figure(value=merged, link="/ui/prs?state=closed"),
            ),
            "ok",
        )

    # -- jobs -------------------------------------------------------------------------------

    async def pool_depths(self) -> dict[str, dict[str, int]] | None:
        """Pool -> {queued, running} now, from the job runner's queue (None: no job runner)."""
        svc = self.ctx.services.find(JOB_SERVICE)
        if svc is None:
            return None
        out = {}
        for pool in svc.pools.values():
            depth = await svc.queue.depth(pool.name)
            out[pool.name] = {"queued": int(depth["queued"]), "running": int(depth["running"])}
        return out

    async def pools(self, now: float) -> tuple[list[PoolFigures] | None, str]:
        svc = self.ctx.services.find(JOB_SERVICE)
        depths = await self.pool_depths()
        if svc is None or depths is None:
            return None, "no job runner registered"
        # Jobs that ended in the last hour were submitted within the last day (no job runs that long).
        ids = await svc.queue.redis.zrevrangebyscore(
            svc.queue.key("all"), "+inf", now - 24 * HOUR_S, start=0, num=JOBS_SCANNED
        )
        failed: dict[str, int] = {}
        for job in await svc.queue.get_many(ids):
            if job.state in FAILED_STATES and (job.finished or 0) >= now - HOUR_S:
                failed[job.pool] = failed.get(job.pool, 0) + 1
        return [
            PoolFigures(
                pool=name,
                queued=Figure(value=depth["queued"], link=jobs_link(pool=name)),
                running=Figure(value=depth["running"], link=jobs_link(pool=name)),
                failed_last_hour=Figure(value=failed.get(name, 0), link=jobs_link(pool=name)),
            )
            for name, depth in depths.items()
        ], "ok"

    # -- agents -----------------------------------------------------------------------------

    @staticmethod
    def no_agents() -> AgentFigures:
        zero = Figure(value=0, link="/ui/agents")
        return AgentFigures(up=zero, working=zero, idle=zero, stalled=zero, down=zero)

    async def agents(self, now: float) -> tuple[AgentFigures, str]:
        """Each agent once, by its liveness (``gateway.swarm.liveness``, what every view shows): up is
        running (working) or idle; stalled; down is everything else (starting, crash-looping,
        quarantined, stopped)."""
        report = await self.liveness.report(now)
        counts = {"working": 0, "idle": 0, "stalled": 0, "down": 0}
        for agent in report.agents:
            if agent.disabled and not agent.supervised:
                continue  # a principal switched off outside any swarm is no agent of it
            bucket = {"running": "working", "idle": "idle", "stalled": "stalled"}.get(agent.state, "down")
            counts[bucket] += 1
        link = "/ui/agents"
        return (
            AgentFigures(
                up=Figure(value=counts["working"] + counts["idle"], link=link),
                **{state: Figure(value=n, link=link) for state, n in counts.items()},
            ),
            "ok" if report.swarm_known else f"ok (heartbeats only: {report.note})",
        )

    # -- spending and throughput ------------------------------------------------------------

    async def spend(self, now: float) -> tuple[SpendFigures | None, str]:
        store = self.ctx.services.find(LLM_USAGE)
        if store is None:
            return None, "no LLM proxy registered"
        swarm = await store.swarm()
        last_hour = await self.series.total("cost:swarm", now - HOUR_S, now)
        share = None
        if swarm.budget_usd_per_day:
            share = last_hour / (swarm.budget_usd_per_day / 24)
        return (
            SpendFigures(
                today_usd=Figure(value=swarm.today_cost_usd, link="/ui/agents"),
                last_hour_usd=Figure(value=last_hour, link="/ui/charts?window=1h#chart-cost"),
                total_usd=Figure(value=swarm.cost_usd, link="/ui/agents"),
                today_tokens=swarm.today_tokens,
                budget_usd_per_day=swarm.budget_usd_per_day,
                budget_usd=swarm.budget_usd,
                budget_tokens_per_day=swarm.budget_tokens_per_day,
                per_hour_of_daily_budget=share,
            ),
            "ok",
        )

    @staticmethod
    def throughput(prs: PrFigures | None, now: float, started: float | None) -> ThroughputFigures | None:
        if prs is None:
            return None
        per_hour = None
        if started is not None:  # over at least an hour: a young swarm's first merge is not a rate
            per_hour = prs.merged.value / max(1.0, (now - started) / HOUR_S)
        return ThroughputFigures(
            accepted_last_hour=prs.merged_last_hour, accepted=prs.merged, per_hour_since_start=per_hour
        )
