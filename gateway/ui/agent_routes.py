"""One agent's page: its state, what it is doing, what it cost (in all, per task, per wake:
``agent_cost.py``), its timeline (live), its jobs, PRs and tasks, the actions on it and a DM composer.

The timeline comes from ``GET /api/agents/<name>/timeline`` (paged with ``before``, searchable with ``q``,
filtered by ``kind``); new entries arrive over ``/ui/agents/<name>/timeline/events`` (SSE, each entry
rendered here) without a reload.
"""

import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup
from sse_starlette import EventSourceResponse, ServerSentEvent

from gateway.errors import GatewayError, NotFound
from gateway.events import resume_id
from gateway.monitor.service import MONITOR
from gateway.monitor.timeline import TimelineStore
from gateway.swarm.liveness import liveness_book
from gateway.ui.agent_cost import agent_cost
from gateway.ui.deps import UiDep, UiSvc
from gateway.ui.internal import InternalApi, has_route
from gateway.ui.service import UiService

AgentName = Annotated[str, Path(pattern=r"^[a-z][a-z0-9-]{0,38}$")]
Before = Annotated[str | None, Query(pattern=r"^[0-9]{1,20}-[0-9]{1,20}$")]
TIMELINE_ROUTE = "/api/agents/{name}/timeline"
KIND_FILTERS = ("wake", "model", "tool_call", "tool_result", "error", "stop")
PR_TOOLS = {"pr_open", "pr_review", "pr_comment", "pr_view", "pr_list"}
JOB_TOOLS = {"job_submit", "job_status", "job_logs", "job_cancel"}
TASK_TOOLS = {"task_claim", "task_renew", "task_release", "task_done", "task_post", "task_list"}


def entry_tags(entry: dict[str, Any]) -> list[str]:
    """What an entry touched, for a badge: pr, job, task, commit, push, chat."""
    data = entry.get("data") or {}
    name = str(data.get("name") or "")
    tags = []
    if name in PR_TOOLS:
        tags.append("pr")
    if name in JOB_TOOLS:
        tags.append("job")
    if name in TASK_TOOLS:
        tags.append("task")
    if name.startswith("chat_") or name == "inbox":
        tags.append("chat")
    command = (
        str((data.get("input") or {}).get("command") or "") if isinstance(data.get("input"), dict) else ""
    )
    if "git commit" in command:
        tags.append("commit")
    if "git push" in command:
        tags.append("push")
    return tags


async def listing(api: InternalApi, path: str, **params: Any) -> list[dict[str, Any]]:
    """A list route's answer, or [] when its component is not registered or it refused."""
    if not has_route(api.app, path):
        return []
    reply = await api.get(path, **params)
    data = reply.json() if reply.ok else []
    return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []


async def window_sum(api: InternalApi, series: str, seconds: float) -> float:
    reply = await api.get(f"/api/monitor/series/{series}", since=time.time() - seconds, step=60)
    if not reply.ok:
        return 0.0
    return float(sum(p["value"] for p in reply.json().get("points") or []))


RECENT_S = 600
USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


async def reported_recent(api: InternalApi, name: str, seconds: float = RECENT_S) -> dict[str, Any] | None:
    """The model calls the agent's timeline holds from the last ``seconds`` (by the time the gateway
    received them): calls, tokens and the gateway's estimate of their cost. A model the agent reaches
    without the LLM proxy (the demo's scripted policy, a key of its own) is booked nowhere else, so this is
    then the only answer to "what did it cost lately"; None when there are none."""
    if not has_route(api.app, TIMELINE_ROUTE):
        return None
    reply = await api.get(f"/api/agents/{name}/timeline", kind="model", limit=500)
    if not reply.ok:
        return None
    since = time.time() - seconds
    page = reply.json()
    entries = [e for e in page.get("entries") or [] if float(e.get("received") or 0) >= since]
    if not entries:
        return None
    tokens = 0
    for e in entries:
        usage = (e.get("data") or {}).get("usage") or {}
        tokens += sum(int(usage.get(f) or 0) for f in USAGE_FIELDS if isinstance(usage, dict))
    return {
        "calls": len(entries),
        "tokens": tokens,
        "cost": sum(float(e.get("cost_usd") or 0.0) for e in entries),
        "estimate": any(e.get("cost_estimate") for e in entries),
        "at_least": bool(page.get("more")) and len(entries) == len(page.get("entries") or []),
    }


router = APIRouter(prefix="/ui")


def render_entries(ui: UiService, entries: list[dict[str, Any]]) -> str:
    return ui.renderer.render("_timeline.html", entries=entries, entry_tags=entry_tags)


async def timeline_page(
    api: InternalApi, name: str, before: str | None, q: str, kind: str | None
) -> tuple[dict[str, Any] | None, str]:
    if not has_route(api.app, TIMELINE_ROUTE):
        return None, "no monitor is registered with this gateway (the monitor plugin keeps timelines)"
    reply = await api.get(f"/api/agents/{name}/timeline", before=before, q=q or None, kind=kind, limit=50)
    if not reply.ok:
        return None, reply.detail
    return reply.json(), ""


@router.get("/agents/{name}", response_class=HTMLResponse, summary="One agent: doing, cost, timeline")
async def agent(
    ui: UiSvc,
    request: Request,
    name: AgentName,
    user: UiDep,
    q: Annotated[str, Query(max_length=200)] = "",
    kind: Annotated[str | None, Query(max_length=100)] = None,
) -> HTMLResponse:
    api = ui.api(user)
    principals = await api.get("/api/principals")
    info = next((p for p in (principals.json() if principals.ok else []) if p["name"] == name), None)
    view = await ui.control.view()
    record = view.records.get(name)
    if info is None and record is None:
        raise NotFound(f"no agent {name!r}")
    liveness = (await liveness_book(ui.ctx).by_name()).get(name)
    page, timeline_error = await timeline_page(api, name, None, q, kind)
    usage = None
    if has_route(request.app, "/api/usage/{name}"):
        got = await api.get(f"/api/usage/{name}")
        usage = got.json() if got.ok else None
    recent: dict[str, float] = {}
    charts: list[tuple[str, Markup]] = []
    if has_route(request.app, "/api/monitor/svg/{chart}"):
        recent = {
            "tokens": await window_sum(api, f"tokens:agent:{name}", RECENT_S),
            "cost": await window_sum(api, f"cost:agent:{name}", RECENT_S),
        }
        for chart in (f"agent-tokens:{name}", f"agent-cost:{name}"):
            got = await api.get(f"/api/monitor/svg/{chart}", since=time.time() - 6 * 3600)
            if got.ok:
                charts.append((chart, Markup(got.body.decode())))  # escaped where it is made
    jobs = (
        await api.get("/api/jobs", submitter=name, limit=10) if has_route(request.app, "/api/jobs") else None
    )
    pulls = (
        await api.get("/api/forge/pulls", state="all") if has_route(request.app, "/api/forge/pulls") else None
    )
    tasks = await api.get("/api/tasks", state="claimed") if has_route(request.app, "/api/tasks") else None
    return ui.page(
        "agent.html",
        request,
        user,
        "agents",
        name=name,
        info=info or {},
        liveness=liveness,
        actions=view.action_reasons(name, bool((info or {}).get("disabled"))),
        timeline=page,
        timeline_error=timeline_error,
        timeline_html=Markup(render_entries(ui, page["entries"])) if page else Markup(""),
        q=q,
        kind=kind or "",
        kinds=KIND_FILTERS,
        usage=usage,
        recent=recent,
        reported=await reported_recent(api, name),
        cost=await agent_cost(api, name, time.time()),
        charts=charts,
        jobs=jobs.json() if jobs is not None and jobs.ok else [],
        pulls=[
            p for p in (pulls.json() if pulls is not None and pulls.ok else []) if p.get("author") == name
        ],
        tasks=[
            t for t in (tasks.json() if tasks is not None and tasks.ok else []) if t.get("holder") == name
        ],
    )


@router.get("/agents/{name}/timeline", response_class=HTMLResponse, summary="Older timeline entries")
async def older(
    ui: UiSvc,
    name: AgentName,
    user: UiDep,
    before: Before = None,
    q: Annotated[str, Query(max_length=200)] = "",
    kind: Annotated[str | None, Query(max_length=100)] = None,
) -> HTMLResponse:
    page, error = await timeline_page(ui.api(user), name, before, q, kind)
    if page is None:
        raise GatewayError(error, 404)
    return HTMLResponse(render_entries(ui, page["entries"]), headers={"X-More": "1" if page["more"] else "0"})


@router.get("/agents/{name}/timeline/events", summary="The agent's new timeline entries (SSE)")
async def live(ui: UiSvc, request: Request, name: AgentName, user: UiDep) -> EventSourceResponse:
    svc = ui.ctx.services.find(MONITOR)
    if svc is None:
        raise NotFound("no monitor is registered with this gateway")
    TimelineStore.check_reader(user.principal, name)
    start = resume_id(request, None) or await svc.timeline.last_id(name)

    async def stream() -> AsyncIterator[ServerSentEvent]:
        async for entry in svc.timeline.follow(name, start, request.is_disconnected):
            data = entry.model_dump(mode="json")
            html = render_entries(ui, [data])
            doing = await svc.timeline.doing(name)
            payload = {"type": "timeline", "id": entry.id, "kind": entry.kind, "html": html}
            payload["doing"] = doing.text if doing else ""
            yield ServerSentEvent(data=json.dumps(payload), id=entry.id)

    return EventSourceResponse(stream(), ping=15)
