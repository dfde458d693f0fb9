"""The Jobs panel: depth per pool, running jobs with their devices, results with flags, each job's log.

Everything comes from the job runner's REST routes (``/api/jobs``, ``/api/jobs/pools``,
``/api/jobs/{id}``, ``/api/jobs/{id}/logs``), called in-process as the operator, like every panel.
When the job runner is not registered (no ``GET /api/jobs/pools``), the panel says so.
"""

import math
from dataclasses import dataclass, field
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from gateway.client.jobs.models import JOB_ID_RE, TERMINAL_STATES
from gateway.errors import BadRequest, GatewayError
from gateway.forge.gate.evidence import EVIDENCE_MEANS
from gateway.monitor.requeue import head_label, requeue_check
from gateway.services import FORGE, JOB_SERVICE
from gateway.ui.deps import UiDep, UiSvc
from gateway.ui.internal import InternalApi, has_route, segment
from gateway.ui.job_prs import prs_of_job
from kswarm_contracts.verification import ADVISORY_FLAGS, ERROR_FLAGS

RETRIES = ("job:requeue", "job:resubmit")  # audited actions that ran a job again as a new one

POOLS_ROUTE = "/api/jobs/pools"
FINISHED_STATES = tuple(sorted(s.value for s in TERMINAL_STATES))
MAX_FETCH = 500  # the most /api/jobs answers in one call
LOG_SHOWN = 200_000  # characters of a log shown on the page; the raw log has all of it
VERDICT_CLASS = {"pass": "ok", "fail": "bad", "error": "bad", "unverifiable": "warn"}


def flag_class(flag: str) -> str:
    """Badge colour of a result flag: crash/timeout (error), advisory (review), any other (fail)."""
    if flag in ERROR_FLAGS:
        return "flag-error"
    return "flag-advisory" if flag in ADVISORY_FLAGS else "flag-fail"


def _float(value: Any) -> float | None:
    try:
        number = float(value)  # the harness writes Infinity/NaN as strings
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def speedup(result: dict[str, Any]) -> dict[str, float] | None:
    """Geometric mean, min and max of the per-case speedups over eager (bench jobs on device pools)."""
    found = [_float(t.get("speedup")) for t in result.get("timings") or [] if isinstance(t, dict)]
    values = [v for v in found if v is not None and v > 0]
    if not values:
        return None
    mean = math.exp(sum(math.log(v) for v in values) / len(values))
    return {"mean": mean, "min": min(values), "max": max(values), "n": len(values)}


def summarise(job: dict[str, Any]) -> dict[str, Any]:
    """A job as the templates show it: its fields plus flags, speedup, wall time and links."""
    raw = job.get("result")
    result: dict[str, Any] = raw if isinstance(raw, dict) else {}
    started, finished = job.get("started"), job.get("finished")
    repo = str(job.get("repo") or "")
    org, _, name = repo.partition("/")
    pr = job.get("reproduce_pr")
    flags = [str(f) for f in result.get("flags") or []]
    return {
        **job,
        "flags": [(f, flag_class(f)) for f in flags],
        "needs_review": bool(result.get("needs_review")),
        "static_violations": len(result.get("static_violations") or []),
        "reasons": [str(r) for r in result.get("reasons") or []],
        "verdict_class": VERDICT_CLASS.get(str(job.get("verdict")), ""),
        # The gateway's level (the job record's evidence), never the result record's own claim.
        "evidence": job.get("evidence"),
        "evidence_means": EVIDENCE_MEANS.get(str(job.get("evidence")), ""),
        "speedup": speedup(result),
        "wall_s": finished - started if started and finished else None,
        "pr_url": f"/ui/prs/{segment(org)}/{segment(name)}/{pr}" if pr and name else None,
        "commit_url": f"/ui/commit/{segment(org)}/{segment(name)}/{job.get('sha')}"
        if name and job.get("sha")
        else None,
        "url": f"/ui/jobs/{segment(str(job.get('id')))}",
    }


def pool_row(pool: dict[str, Any]) -> dict[str, Any]:
    """One pool: depth, running, dead letters, and its nodes with each device marked busy or free."""
    config = pool.get("config") or {}
    busy: dict[str, set[str]] = {}
    for job in pool.get("running_jobs") or []:
        busy.setdefault(str(job.get("node") or ""), set()).update(str(d) for d in job.get("allocated") or [])
    nodes = [
        {
            "name": node.get("name"),
            "devices": [
                (str(d), str(d) in busy.get(str(node.get("name")), set())) for d in node.get("devices") or []
            ],
        }
        for node in config.get("nodes") or []
    ]
    return {
        "name": pool.get("pool"),
        "device": config.get("device", "?"),
        "executor": (config.get("executor") or {}).get("kind", "?"),
        "nodes": nodes,
        "queued": int(pool.get("queued") or 0),
        "running": int(pool.get("running") or 0),
        "dead_letters": int(pool.get("dead_letters") or 0),
        "queued_by_agent": pool.get("queued_by_agent") or {},
        "running_by_agent": pool.get("running_by_agent") or {},
        "busy_devices": sum(len(ids) for ids in busy.values()),
    }


@dataclass
class JobsView:
    """What the Jobs panel shows."""

    pools: list[dict[str, Any]] = field(default_factory=list)
    running: list[dict[str, Any]] = field(default_factory=list)
    queued: list[dict[str, Any]] = field(default_factory=list)
    finished: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


async def load_jobs(
    api: InternalApi, pool: str | None, state: str | None, flagged: bool, limit: int
) -> JobsView:
    view = JobsView()
    reply = await api.get(POOLS_ROUTE)
    if not reply.ok:
        view.errors.append(f"GET {POOLS_ROUTE}: {reply.status} {reply.detail}")
        return view
    pools = [p for p in reply.json() if isinstance(p, dict)]
    view.pools = [pool_row(p) for p in pools]
    shown = [p for p in pools if pool in (None, p.get("pool"))]
    view.running = sorted(
        (summarise(j) for p in shown for j in p.get("running_jobs") or []),
        key=lambda j: j.get("started") or 0,
        reverse=True,
    )
    queued = sum(int(p.get("queued") or 0) for p in shown)
    if queued:
        got = await api.get("/api/jobs", state="queued", pool=pool, limit=min(queued, 100))
        if got.ok:
            view.queued = sorted((summarise(j) for j in got.json()), key=lambda j: j.get("submitted") or 0)
        else:
            view.errors.append(f"GET /api/jobs?state=queued: {got.status} {got.detail}")
    # Newest submissions first: among the newest (limit + active) at least ``limit`` are final. The
    # flagged filter looks at the newest 4 x limit results.
    wanted = limit * (4 if flagged else 1)
    fetch = min(MAX_FETCH, wanted if state else wanted + queued + len(view.running))
    got = await api.get("/api/jobs", full="true", pool=pool, state=state, limit=fetch)
    if not got.ok:
        view.errors.append(f"GET /api/jobs: {got.status} {got.detail}")
        return view
    finished = [summarise(j) for j in got.json() if j.get("state") in FINISHED_STATES]
    if flagged:
        finished = [j for j in finished if j["flags"] or j["needs_review"] or j["static_violations"]]
    finished.sort(key=lambda j: j.get("finished") or j.get("submitted") or 0, reverse=True)
    view.finished = finished[:limit]
    return view


def filter_links(
    pools: list[str], pool: str | None, state: str | None, flagged: bool
) -> dict[str, list[tuple[str, str, bool]]]:
    """(label, url, active) for the pool, state and flag filters; each keeps the other filters."""

    def url(**change: Any) -> str:
        params = {"pool": pool, "state": state, "flagged": "1" if flagged else None} | change
        query = urlencode({k: v for k, v in params.items() if v})
        return "/ui/jobs" + (f"?{query}" if query else "")

    return {
        "pool": [("all", url(pool=None), pool is None)] + [(p, url(pool=p), p == pool) for p in pools],
        "state": [("all", url(state=None), state is None)]
        + [(s, url(state=s), s == state) for s in FINISHED_STATES],
        "flagged": [("any", url(flagged=None), not flagged), ("flagged", url(flagged="1"), flagged)],
    }


router = APIRouter(prefix="/ui")


def available(request: Request) -> bool:
    return has_route(request.app, POOLS_ROUTE)


@router.get("/jobs", response_class=HTMLResponse, summary="Jobs: depth per pool, running, results")
async def jobs(
    ui: UiSvc,
    request: Request,
    user: UiDep,
    pool: str | None = None,
    state: str | None = None,
    flagged: bool = False,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> HTMLResponse:
    pool, state = pool or None, state or None
    if state is not None and state not in FINISHED_STATES:
        raise BadRequest(f"state is one of {', '.join(FINISHED_STATES)}")
    on = available(request)
    view = await load_jobs(ui.api(user), pool, state, flagged, limit) if on else JobsView()
    links = filter_links([str(p["name"]) for p in view.pools], pool, state, flagged)
    return ui.page(
        "jobs.html",
        request,
        user,
        "jobs",
        available=on,
        view=view,
        links=links,
        pool=pool,
        state=state,
        flagged=flagged,
        totals={k: sum(p[k] for p in view.pools) for k in ("queued", "running", "dead_letters")},
    )


@router.get("/jobs/{job_id}", response_class=HTMLResponse, summary="One job: fields, result, flags, log")
async def job(ui: UiSvc, request: Request, job_id: str, user: UiDep) -> HTMLResponse:
    def missing(detail: str) -> HTMLResponse:
        return ui.page("job.html", request, user, "jobs", status=404, job=None, job_id=job_id, error=detail)

    if not available(request):
        return missing("No job runner is registered with this gateway (GET /api/jobs/pools is missing).")
    if not JOB_ID_RE.match(job_id):
        return missing(f"No job {job_id}: job ids look like j18f3a2b4c5d6e7.")
    api = ui.api(user)
    reply = await api.get(f"/api/jobs/{job_id}")
    if reply.status == 404:
        return missing(reply.detail)
    if not reply.ok:
        raise GatewayError(reply.detail, reply.status)
    logs = await api.get(f"/api/jobs/{job_id}/logs")
    log = logs.body.decode(errors="replace") if logs.ok else ""
    data = reply.json()
    requeued_as: list[str] = []
    if has_route(request.app, "/api/monitor/actions"):
        audit = await api.get("/api/monitor/actions", target=job_id, limit=20)
        for record in audit.json() if audit.ok else []:
            if record.get("action") in RETRIES and record.get("outcome") == "done":
                requeued_as.append(str(record.get("detail")))
    retry = None
    if data.get("state") in FINISHED_STATES:  # whether Requeue can work, else what can (the PR's head)
        runner = ui.ctx.services.find(JOB_SERVICE)
        stored = await runner.queue.get(job_id) if runner is not None else None
        retry = await requeue_check(ui.ctx.services.find(FORGE), stored) if stored else None
    return ui.page(
        "job.html",
        request,
        user,
        "jobs",
        retry=retry,
        resubmit_label=head_label(retry.head_of) if retry else "",
        job=summarise(data),
        result=data.get("result") if isinstance(data.get("result"), dict) else None,
        log=log[-LOG_SHOWN:],
        log_cut=max(0, len(log) - LOG_SHOWN),
        log_error="" if logs.ok else f"{logs.status} {logs.detail}",
        raw_log=f"/ui/api/jobs/{job_id}/logs",
        terminal=data.get("state") in FINISHED_STATES,
        flag_class=flag_class,
        requeued_as=requeued_as,
        prs=await prs_of_job(api, ui.ctx.services.find(FORGE), data),
    )
