"""Attention: everything that needs a human now, each with its reason, a link and the actions that help.

Computed on demand from the other components' state (each source optional; a missing one is reported,
not an error):

| item | source | when |
|---|---|---|
| agent stalled, crash-looping, quarantined | its liveness (``gateway.swarm.liveness``) | that state |
| agent exited, restarting | its liveness | ``stopped`` while the supervisor backs off |
| PR blocked | forge, the gate's audit | open longer than ``pr_blocked_after_s``; the gate's last reasons |
| job failed | job runner | state ``error`` or ``timeout`` (harness or infrastructure) within the window |
| job dead-lettered | job runner | an entry in the pool's dead letters |
| pool without worker | job runner | jobs queued, no node lease held by any worker |
| budget | LLM proxy | an agent past ``budget_warn_ratio`` of a budget (critical when used up) |
| LLM hold | LLM proxy | an answer booked more than its request reserved: the agent's calls are stopped |
| claim lapsed | the monitor's claim windows | a lease lapsed within the window and nobody holds the task |
| speedup to review | job runner | a result with ``needs_review`` / ``suspicious_speedup`` within the window |

A kernel that fails verification is an agent's business (it reads the result), not the operator's, so a
``failed`` verdict is not listed. Items an operator may dismiss (flagged speedups, lapsed claims, failed
jobs) stay dismissed until they happen again (``ks:mon:ack``).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from gateway.client.jobs.models import Job
from gateway.context import GatewayContext
from gateway.llm.refusals import clear_command
from gateway.llm.usage_models import AgentUsage
from gateway.monitor import keys
from gateway.monitor.models import AttentionAction, AttentionItem, AttentionReport, ClaimWindow, Severity
from gateway.monitor.requeue import head_label, requeue_check
from gateway.monitor.settings import MonitorSettings
from gateway.services import FORGE, JOB_SERVICE, LLM_USAGE, REVIEW_GATE, TASK_BOARD
from gateway.swarm.liveness import LivenessBook

log = logging.getLogger("kswarm.monitor")

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
# The liveness states that put an agent on the list, and how urgent each is.
AGENT_STATES: dict[str, Severity] = {
    "stalled": "critical",
    "crash-looping": "critical",
    "quarantined": "info",
}
BUDGET_FIELDS = (
    ("total_tokens", "budget_tokens", "token budget"),
    ("cost_usd", "budget_usd", "USD budget"),
    ("today_tokens", "budget_tokens_per_day", "daily token budget"),
    ("today_cost_usd", "budget_usd_per_day", "daily USD budget"),
)


def agent_actions(name: str) -> list[AttentionAction]:
    return [
        AttentionAction(label="Restart", url=f"/ui/agents/{name}/restart"),
        AttentionAction(
            label="Quarantine",
            url=f"/ui/agents/{name}/quarantine",
            confirm=f"Quarantine {name}? It is stopped and its tokens revoked.",
        ),
    ]


def ack_action(key: str) -> AttentionAction:
    return AttentionAction(label="Dismiss", url=f"/ui/api/attention/{key}/ack")


def _pr_path(repo: str, number: int) -> str:
    org, _, name = repo.partition("/")
    return f"/ui/prs/{org}/{name}/{number}"


class AttentionBuilder:
    """``report()``: the current list, newest first; every source that fails is named, not raised."""

    def __init__(self, ctx: GatewayContext, settings: MonitorSettings, liveness: LivenessBook) -> None:
        self.ctx = ctx
        self.settings = settings
        self.liveness = liveness

    async def report(self) -> AttentionReport:
        now = time.time()
        items: list[AttentionItem] = []
        sources: dict[str, str] = {}
        for name, part in (
            ("agents", self.agents),
            ("prs", self.prs),
            ("jobs", self.jobs),
            ("budgets", self.budgets),
            ("claims", self.claims),
        ):
            try:
                found, state = await part(now)
            except Exception as exc:  # one broken source must not hide the others
                log.exception("attention source %s failed", name)
                found, state = [], f"failed: {type(exc).__name__}: {exc}"
            items += found
            sources[name] = state
        acks = await self.ctx.redis.hgetall(keys.ACK)
        shown = [i for i in items if not (i.dismissable and i.key in acks and float(acks[i.key]) >= i.since)]
        shown.sort(key=lambda i: (-i.since, SEVERITY_ORDER[i.severity]))
        return AttentionReport(items=shown, computed_at=now, sources=sources)

    # -- agents -----------------------------------------------------------------------------

    async def agents(self, now: float) -> tuple[list[AttentionItem], str]:
        """One item per agent whose liveness (``gateway.swarm.liveness``: the state every view shows)
        needs a human: stalled, crash-looping, quarantined, or exited and waiting for a back-off restart."""
        report = await self.liveness.report(now)
        items = []
        for agent in report.agents:
            backoff = agent.state == "stopped" and agent.supervisor_state == "backoff"
            if agent.state not in AGENT_STATES and not backoff:
                continue
            severity = "warning" if backoff else AGENT_STATES[agent.state]
            items.append(
                AttentionItem(
                    key=f"agent:{agent.name}",
                    kind="agent",
                    severity=severity,
                    title=f"{agent.name} is {agent.state}",
                    reason=agent.reason,
                    since=agent.since,
                    link=f"/ui/agents/{agent.name}",
                    subject=agent.name,
                    actions=(
                        [AttentionAction(label="Release", url=f"/ui/agents/{agent.name}/release")]
                        if agent.state == "quarantined"
                        else agent_actions(agent.name)
                    ),
                )
            )
        state = "ok" if report.swarm_known else f"ok (heartbeats only: {report.note})"
        return items, state

    # -- PRs --------------------------------------------------------------------------------

    async def prs(self, now: float) -> tuple[list[AttentionItem], str]:
        forge, gate = self.ctx.services.find(FORGE), self.ctx.services.find(REVIEW_GATE)
        if forge is None or gate is None:
            return [], "no forge registered"
        items = []
        for repo in await forge.list_repos():
            for pr in await forge.list_prs(repo.org, repo.name, "open"):
                open_s = now - (pr.created or now)
                if open_s < self.settings.pr_blocked_after_s:
                    continue
                audit = await gate.audit(pr.full_name, pr.number, 1)
                last = audit[-1] if audit else None
                reasons = [r.get("message", "") for r in (last or {}).get("reasons") or []]
                hard = any(r.get("blocking") for r in (last or {}).get("reasons") or [])
                why = "; ".join(reasons) if reasons else "the gate has not decided on it yet"
                items.append(
                    AttentionItem(
                        key=f"pr:{pr.full_name}#{pr.number}",
                        kind="pr",
                        severity="critical" if hard else "warning",
                        title=f"{pr.full_name}#{pr.number} {'blocked' if hard else 'waiting'} for "
                        f"{open_s / 60:.0f} min: {pr.title}",
                        reason=why,
                        since=(pr.created or now) + self.settings.pr_blocked_after_s,
                        link=_pr_path(pr.full_name, pr.number),
                        subject=f"{pr.full_name}#{pr.number}",
                    )
                )
        return items, "ok"

    # -- jobs and pools ---------------------------------------------------------------------

    async def jobs(self, now: float) -> tuple[list[AttentionItem], str]:
        svc = self.ctx.services.find(JOB_SERVICE)
        if svc is None:
            return [], "no job runner registered"
        items = []
        window = now - self.settings.recent_window_s
        dead_letters = {pool.name: await svc.queue.dead_letters(pool.name, 20) for pool in svc.pools.values()}
        dead_ids = {d.get("job") or d.get("id", "") for dead in dead_letters.values() for d in dead}
        for job in await svc.queue.list(limit=200):
            finished = job.finished or job.submitted
            if finished < window:
                continue
            result = job.result if isinstance(job.result, dict) else {}
            flags = [str(f) for f in result.get("flags") or []]
            if job.state in ("error", "timeout") and job.id not in dead_ids:  # a dead letter says more
                retry, why_not = await self._retry(job)
                items.append(
                    AttentionItem(
                        key=f"job:{job.id}",
                        kind="job",
                        severity="warning",
                        title=f"job {job.id} {job.state}: {job.task} ({job.pool}) by {job.submitter}",
                        reason=(job.error or f"the job ended in {job.state}") + why_not,
                        since=finished,
                        link=f"/ui/jobs/{job.id}",
                        subject=job.id,
                        actions=[*retry, ack_action(f"job:{job.id}")],
                        dismissable=True,
                    )
                )
            if result.get("needs_review") or "suspicious_speedup" in flags:
                items.append(
                    AttentionItem(
                        key=f"review:{job.id}",
                        kind="review",
                        severity="info",
                        title=f"speedup to check: job {job.id}, {job.task} by {job.submitter}",
                        reason="the harness flagged the result for a human look "
                        f"({', '.join(flags) or 'needs_review'})",
                        since=finished,
                        link=f"/ui/jobs/{job.id}",
                        subject=job.id,
                        actions=[ack_action(f"review:{job.id}")],
                        dismissable=True,
                    )
                )
        for pool in svc.pools.values():
            for dead in dead_letters[pool.name]:
                job_id = dead.get("job") or dead.get("id", "")
                since = float(dead["id"].split("-")[0]) / 1000 if "-" in dead.get("id", "") else now
                dead_job = await svc.queue.get(job_id) if job_id else None
                retry, why_not = await self._retry(dead_job) if dead_job is not None else ([], "")
                items.append(
                    AttentionItem(
                        key=f"dead:{pool.name}:{job_id}",
                        kind="job",
                        severity="critical",
                        title=f"job {job_id} dead-lettered in {pool.name}",
                        reason=(dead.get("reason") or dead.get("error") or "too many attempts") + why_not,
                        since=since,
                        link=f"/ui/jobs/{job_id}" if job_id else "/ui/jobs",
                        subject=job_id,
                        actions=[*retry, ack_action(f"dead:{pool.name}:{job_id}")],
                        dismissable=True,
                    )
                )
            depth = await svc.queue.depth(pool.name)
            if depth["queued"] and not await self._has_worker(svc.queue.key("lease", pool.name, "*")):
                items.append(
                    AttentionItem(
                        key=f"pool:{pool.name}",
                        kind="pool",
                        severity="critical",
                        title=f"pool {pool.name}: {depth['queued']} job(s) queued, no worker",
                        reason="no worker holds a node of this pool: start python -m orchestrator.worker "
                        f"--pool {pool.name}",
                        since=await self._oldest_queued(svc, pool.name, now),
                        link=f"/ui/jobs?pool={pool.name}",
                        subject=pool.name,
                    )
                )
        return items, "ok"

    async def _retry(self, job: Job) -> tuple[list[AttentionAction], str]:
        """The retry a failed job's item offers: Requeue while its commit is reachable; else why not,
        and a resubmission at its PR's (or branch's) head when there is one (``gateway.monitor.requeue``)."""
        check = await requeue_check(self.ctx.services.find(FORGE), job)
        if check.possible:
            return [AttentionAction(label="Requeue", url=f"/ui/api/actions/jobs/{job.id}/requeue")], ""
        if check.head_sha is None:
            return [], f"; not requeued: {check.reason}"
        resubmit = AttentionAction(
            label=head_label(check.head_of), url=f"/ui/api/actions/jobs/{job.id}/resubmit"
        )
        return [resubmit], f"; not requeued: {check.reason}"

    async def _has_worker(self, pattern: str) -> bool:
        async for _ in self.ctx.redis.scan_iter(match=pattern, count=100):
            return True
        return False

    @staticmethod
    async def _oldest_queued(svc: Any, pool: str, now: float) -> float:
        queued = await svc.queue.list(pool=pool, state="queued", limit=50)
        return min((j.submitted for j in queued), default=now)

    # -- budgets ----------------------------------------------------------------------------

    async def budgets(self, now: float) -> tuple[list[AttentionItem], str]:
        store = self.ctx.services.find(LLM_USAGE)
        if store is None:
            return [], "no LLM proxy registered"
        usage = dict(await store.all())
        items = [self._hold(name, u, now) for name, u in usage.items() if u.hold]
        usage["swarm"] = await store.swarm()
        for name, u in usage.items():
            worst: tuple[float, str, float, float] | None = None
            for used_field, limit_field, label in BUDGET_FIELDS:
                limit = getattr(u, limit_field)
                used = float(getattr(u, used_field))
                if limit is None or limit <= 0:
                    continue
                ratio = used / float(limit)
                if ratio >= self.settings.budget_warn_ratio and (worst is None or ratio > worst[0]):
                    worst = (ratio, label, used, float(limit))
            if worst is None:
                continue
            ratio, label, used, limit = worst
            items.append(
                AttentionItem(
                    key=f"budget:{name}",
                    kind="budget",
                    severity="critical" if ratio >= 1 else "warning",
                    title=f"{'the swarm' if name == 'swarm' else name} used {ratio:.0%} of its {label}",
                    reason=f"{used:,.4g} of {limit:,.4g}"
                    + ("; its requests are refused" if ratio >= 1 else ""),
                    since=u.last_request or now,
                    link="/ui/charts" if name == "swarm" else f"/ui/agents/{name}",
                    subject=name,
                )
            )
        return items, "ok"

    @staticmethod
    def _hold(name: str, u: AgentUsage, now: float) -> AttentionItem:
        """An agent whose books an answer overran: stopped until an operator clears it."""
        return AttentionItem(
            key=f"llm-hold:{name}",
            kind="budget",
            severity="critical",
            title=f"{name}'s model calls are stopped: an answer booked more than it reserved",
            reason=f"{u.hold}; clear it with {clear_command(name)}",
            since=u.hold_since or now,
            link=f"/ui/agents/{name}",
            subject=name,
        )

    # -- claims -----------------------------------------------------------------------------

    async def claims(self, now: float) -> tuple[list[AttentionItem], str]:
        board = self.ctx.services.find(TASK_BOARD)
        if board is None:
            return [], "no task board registered"
        since_ms = int((now - self.settings.recent_window_s) * 1000)
        rows = await self.ctx.redis.xrevrange(keys.CLAIMS, "+", f"{since_ms}-0", 500)
        # Nothing to do about a lapse once the task is held again or done; and only a task's newest
        # window counts (rows are newest first): a lapse followed by another agent's finished claim
        # (which the board may already have forgotten as a holder) is resolved.
        settled = {t.id for t in await board.board.list("claimed")} | {
            t.id for t in await board.board.list("done")
        }
        seen: set[str] = set()
        items: dict[str, AttentionItem] = {}
        for _, fields in rows:
            try:
                window = ClaimWindow.model_validate(json.loads(fields.get("json", "{}")))
            except ValueError:
                continue
            newest = window.task not in seen
            seen.add(window.task)
            if not newest or window.how != "lapsed" or window.task in settled:
                continue
            until = window.until or now
            key = f"claim:{window.task}:{int(until)}"
            items[window.task] = AttentionItem(
                key=key,
                kind="claim",
                severity="warning",
                title=f"{window.agent}'s claim on task {window.task} lapsed",
                reason="the lease was not renewed; the task is open again and nobody holds it",
                since=until,
                link="/ui/tasks",
                subject=window.task,
                actions=[ack_action(key)],
                dismissable=True,
            )
        return list(items.values()), "ok"
