"""REST of the monitor: Attention, timelines, history (JSON and SVG), cost, claims, operator actions.

Who may call what: everything is for operators (``OperatorOnly``) except the timelines — an agent writes
its own (``POST /api/timeline``: the name comes from the token; operators, workers and the gate are
refused) and reads its own; operators read every one.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import Response
from sse_starlette import EventSourceResponse, ServerSentEvent

from gateway.deps import AnyPrincipal, Ctx, OperatorOnly, provided
from gateway.errors import BadRequest, NotFound
from gateway.events import resume_id
from gateway.models import MESSAGE_ID_SCHEMA, optional_message_id
from gateway.monitor import keys
from gateway.monitor.chartbook import AGENT_CHARTS, CHARTS
from gateway.monitor.models import (
    ActionRecord,
    ActionResult,
    AttentionReport,
    ClaimWindow,
    CommentBody,
    CostPoint,
    CostReport,
    Doing,
    ReassignBody,
    ReviewBody,
    Series,
    SeriesPoint,
    TimelinePage,
    TimelinePost,
)
from gateway.monitor.overview_models import Overview
from gateway.monitor.series import resample
from gateway.monitor.service import MONITOR, MonitorService
from gateway.monitor.timeline import TimelineStore
from gateway.principals import PrincipalKind
from gateway.tasks.models import TaskSpec

EPOCH_MAX_S = 4_102_444_800  # 2100-01-01: a window past it is a mistake, not a question
Monitor = Annotated[MonitorService, Depends(provided(MONITOR))]
AgentName = Annotated[str, Path(pattern=r"^[a-z][a-z0-9-]{0,38}$", description="Agent name.")]
JobId = Annotated[str, Path(pattern=r"^j[0-9a-f]{12,24}$", description="Job id.")]
TaskId = Annotated[str, Path(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$", description="Task id.")]
Segment = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")]
AckKey = Annotated[
    str, Path(pattern=r"^[a-z]+:[A-Za-z0-9_.:-]{1,200}$", description="An Attention item key.")
]
SeriesName = Annotated[str, Path(pattern=r"^[A-Za-z0-9_.:@-]{1,300}$", description="A series name.")]
Since = Annotated[float | None, Query(description="Unix time (default: 6 hours ago).")]
Until = Annotated[float | None, Query(description="Unix time (default: now).")]
Step = Annotated[float | None, Query(ge=60, le=86400, description="Bucket size in seconds.")]
TIMELINE_KINDS = {"start", "wake", "model", "tool_call", "tool_result", "compaction", "error", "stop", "note"}


def parse_kinds(kind: str | None) -> set[str]:
    kinds = {k.strip() for k in (kind or "").split(",") if k.strip()}
    unknown = kinds - TIMELINE_KINDS
    if unknown:
        raise BadRequest(f"kind is a comma-separated subset of {', '.join(sorted(TIMELINE_KINDS))}")
    return kinds


router = APIRouter(tags=["monitor"])

# -- attention --------------------------------------------------------------------------


@router.get("/api/attention", response_model=AttentionReport, summary="Everything that needs a human now")
async def attention(svc: Monitor, _: OperatorOnly) -> AttentionReport:
    return await svc.attention.report()


@router.post("/api/attention/{key}/ack", response_model=ActionResult, summary="Dismiss an Attention item")
async def ack(key: AckKey, svc: Monitor, who: OperatorOnly) -> ActionResult:
    return await svc.actions.ack(who, key)


# -- timelines --------------------------------------------------------------------------


@router.post("/api/timeline", summary="Report entries of your own timeline (agents)")
async def report(body: TimelinePost, svc: Monitor, who: AnyPrincipal) -> dict[str, Any]:
    ids = await svc.timeline.append(who, body.entries)
    return {"agent": who.name, "stored": len(ids), "ids": ids}


@router.get("/api/agents/{name}/timeline", response_model=TimelinePage, summary="An agent's timeline")
async def timeline(
    name: AgentName,
    svc: Monitor,
    who: AnyPrincipal,
    before: Annotated[
        str | None, Query(description="Entries older than this id", json_schema_extra=MESSAGE_ID_SCHEMA)
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    q: Annotated[str, Query(max_length=200, description="Words every entry shown contains.")] = "",
    kind: Annotated[str | None, Query(description="Comma-separated kinds (tool_call, model, ...).")] = None,
) -> TimelinePage:
    TimelineStore.check_reader(who, name)
    older_than = optional_message_id(before, "before")  # the one id check: a 400 naming it
    return await svc.timeline.page(name, older_than, limit, q, parse_kinds(kind))


@router.get("/api/agents/{name}/timeline/events", summary="An agent's timeline, live (SSE)")
async def timeline_events(
    request: Request,
    name: AgentName,
    svc: Monitor,
    who: AnyPrincipal,
    after: Annotated[
        str | None,
        Query(description="Resume after this id (or the header)", json_schema_extra=MESSAGE_ID_SCHEMA),
    ] = None,
) -> EventSourceResponse:
    TimelineStore.check_reader(who, name)
    waits = request.app.state.ctx.waits
    waits.check(who)  # a 429 now, before the stream's answer starts
    start = resume_id(request, after, "after") or await svc.timeline.last_id(name)

    async def stream() -> AsyncGenerator[ServerSentEvent]:
        async for entry in svc.timeline.follow(name, start, request.is_disconnected):
            yield ServerSentEvent(data=entry.model_dump_json(), id=entry.id)

    return EventSourceResponse(waits.guarded(who, stream()), ping=15)


@router.get(
    "/api/monitor/overview",
    response_model=Overview,
    summary="What the swarm is doing: tasks, PRs, jobs per pool, agents, spend, throughput, Attention",
)
async def overview(svc: Monitor, _: OperatorOnly) -> Overview:
    return await svc.overview.report()


@router.get("/api/monitor/doing", response_model=dict[str, Doing], summary="What each agent is doing now")
async def doing(svc: Monitor, _: OperatorOnly, ctx: Ctx) -> dict[str, Doing]:
    agents = [p.name for p in await ctx.principals.list(PrincipalKind.agent)]
    return await svc.timeline.doing_many(agents)


@router.get("/api/monitor/heads", summary="A branch's heads as they were pushed, oldest first")
async def heads(
    svc: Monitor,
    _: OperatorOnly,
    repo: Annotated[str, Query(pattern=r"^[A-Za-z0-9][\w.-]{0,63}/[A-Za-z0-9][\w.-]{0,99}$")],
    branch: Annotated[str, Query(min_length=1, max_length=200)],
) -> list[dict[str, Any]]:
    raw = await svc.series.redis.lrange(keys.heads(repo, branch), 0, -1)
    return [json.loads(r) for r in raw]


# -- history ----------------------------------------------------------------------------


@router.get("/api/monitor/series", summary="Names of the series kept (per-minute history)")
async def series_names(
    svc: Monitor, _: OperatorOnly, prefix: Annotated[str, Query(max_length=200)] = ""
) -> list[str]:
    return await svc.series.names(prefix)


@router.get("/api/monitor/series/{name}", response_model=Series, summary="One series, bucketed")
async def series(
    name: SeriesName,
    svc: Monitor,
    _: OperatorOnly,
    since: Since = None,
    until: Until = None,
    step: Step = None,
    gauge: bool = False,
) -> Series:
    until = until or time.time()
    since = since or until - 6 * 3600
    if since >= until:
        raise BadRequest("since must be before until")
    step = step or 60.0
    if (until - since) / step > 20_000:
        raise BadRequest("too many buckets: use a larger step or a shorter window")
    points = resample(await svc.series.read(name, since, until), since, until, step, gauge)
    return Series(
        name=name, step_s=step, gauge=gauge, points=[SeriesPoint(ts=p.ts, value=p.value) for p in points]
    )


def known_chart(chart: str) -> str:
    base = chart.split(":", 1)[0]
    if chart not in CHARTS and not (base in AGENT_CHARTS and ":" in chart):
        names = ", ".join([*CHARTS, *(f"{a}:<agent>" for a in AGENT_CHARTS)])
        raise NotFound(f"no chart {chart!r}; charts: {names}")
    return chart


@router.get("/api/monitor/charts", summary="The charts and what they show")
async def charts(_: OperatorOnly) -> dict[str, str]:
    return {name: spec.title for name, spec in CHARTS.items()}


@router.get("/api/monitor/charts/{chart}", response_model=list[Series], summary="A chart's data")
async def chart_json(
    chart: SeriesName, svc: Monitor, _: OperatorOnly, since: Since = None, until: Until = None
) -> list[Series]:
    return await svc.charts.json(known_chart(chart), since, until)


@router.get("/api/monitor/svg/{chart}", summary="A chart as SVG", response_class=Response)
async def chart_svg(
    chart: SeriesName, svc: Monitor, _: OperatorOnly, since: Since = None, until: Until = None
) -> Response:
    svg = await svc.charts.svg(known_chart(chart), since, until)
    return Response(svg, media_type="image/svg+xml", headers={"Content-Security-Policy": "script-src 'none'"})


# -- cost and claims --------------------------------------------------------------------


@router.get("/api/monitor/cost", response_model=CostReport, summary="LLM usage attributed to tasks")
async def cost(svc: Monitor, _: OperatorOnly) -> CostReport:
    return await svc.cost.report(await svc.booked_models())


@router.get("/api/monitor/cost/window", response_model=CostPoint, summary="What an agent spent on a task")
async def cost_window(
    svc: Monitor,
    _: OperatorOnly,
    task: Annotated[str, Query(pattern=r"^([a-z0-9][a-z0-9_.-]{0,63}|-)$")],
    agent: Annotated[str, Query(pattern=r"^[a-z][a-z0-9-]{0,38}$")],
    since: Annotated[float, Query(ge=0, le=EPOCH_MAX_S, description="Unix seconds")],
    until: Annotated[float, Query(ge=0, le=EPOCH_MAX_S, description="Unix seconds")],
) -> CostPoint:
    if since > until:
        raise BadRequest("since must not be after until")
    return await svc.cost.window(task, agent, since, until, (await svc.booked_models()).get(agent))


@router.get("/api/monitor/claims", response_model=list[ClaimWindow], summary="Claim windows, newest first")
async def claims(
    svc: Monitor,
    _: OperatorOnly,
    task: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> list[ClaimWindow]:
    return await svc.claims(task, limit)


@router.get(
    "/api/monitor/actions", response_model=list[ActionRecord], summary="Operator actions, newest first"
)
async def actions(
    svc: Monitor,
    _: OperatorOnly,
    target: Annotated[str | None, Query(max_length=300)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> list[ActionRecord]:
    return await svc.actions.log.recent(limit, target)


# -- operator actions -------------------------------------------------------------------


@router.post(
    "/api/actions/prs/{org}/{repo}/{number}/review",
    response_model=ActionResult,
    summary="Approve, request changes on or comment-review a PR (operators; audited)",
)
async def review(
    org: Segment,
    repo: Segment,
    number: Annotated[int, Path(ge=1)],
    body: ReviewBody,
    svc: Monitor,
    who: OperatorOnly,
) -> ActionResult:
    return await svc.actions.review(who, org, repo, number, body)


@router.post(
    "/api/actions/prs/{org}/{repo}/{number}/comment",
    response_model=ActionResult,
    summary="Comment on a PR (operators; audited)",
)
async def comment(
    org: Segment,
    repo: Segment,
    number: Annotated[int, Path(ge=1)],
    body: CommentBody,
    svc: Monitor,
    who: OperatorOnly,
) -> ActionResult:
    return await svc.actions.comment(who, org, repo, number, body.body)


@router.post(
    "/api/actions/jobs/{job_id}/cancel", response_model=ActionResult, summary="Cancel a job (audited)"
)
async def cancel(job_id: JobId, svc: Monitor, who: OperatorOnly) -> ActionResult:
    return await svc.actions.cancel_job(who, job_id)


@router.post(
    "/api/actions/jobs/{job_id}/requeue",
    response_model=ActionResult,
    summary="Run a finished job's kernel again at the same commit, as a new job (audited)",
)
async def requeue(job_id: JobId, svc: Monitor, who: OperatorOnly) -> ActionResult:
    return await svc.actions.requeue_job(who, job_id)


@router.post(
    "/api/actions/jobs/{job_id}/resubmit",
    response_model=ActionResult,
    summary="Run a finished job's kernel again at the current head of its PR or branch (audited)",
)
async def resubmit(job_id: JobId, svc: Monitor, who: OperatorOnly) -> ActionResult:
    return await svc.actions.requeue_job(who, job_id, at_head=True)


@router.post("/api/actions/tasks", response_model=ActionResult, summary="Post a task (audited)")
async def post_task(spec: TaskSpec, svc: Monitor, who: OperatorOnly) -> ActionResult:
    return await svc.actions.post_task(who, spec)


@router.post("/api/actions/tasks/{task_id}/release", response_model=ActionResult, summary="Release a claim")
async def release(task_id: TaskId, svc: Monitor, who: OperatorOnly) -> ActionResult:
    return await svc.actions.release_task(who, task_id)


@router.post(
    "/api/actions/tasks/{task_id}/reassign",
    response_model=ActionResult,
    summary="Release a task and ask another agent to claim it (audited)",
)
async def reassign(task_id: TaskId, body: ReassignBody, svc: Monitor, who: OperatorOnly) -> ActionResult:
    return await svc.actions.reassign_task(who, task_id, body)
