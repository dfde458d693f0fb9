"""The Agents panel and the operator's actions on agents (one agent: ``agent_routes``; PRs: ``pr_routes``;
Jobs: ``jobs_routes``; Dataset: ``dataset_routes``; Tasks: ``tasks_routes``; Attention, Charts:
``monitor_routes``)."""

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel, Field, ValidationError

from gateway.swarm.liveness import LivenessReport, liveness_book
from gateway.swarm.models import ControlAction, ControlBody
from gateway.ui.deps import ActingDep, UiDep, UiSvc
from gateway.ui.internal import InternalApi, get_routes, has_route
from gateway.ui.render import Table, tabulate
from gateway.ui.swarm import SwarmUnavailable, SwarmView

# Where the components that are built separately publish their data; the panels list every
# parameterless GET route under these prefixes, so a new endpoint shows up without a UI change.
# (The job runner has its own panel, gateway/ui/jobs_routes.py.)
SOURCES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {}  # (the dataset has its own panel now)
USAGE_ROUTE = "/api/usage"
DOING_ROUTE = "/api/monitor/doing"


class ActionResult(BaseModel):
    """What an action on an agent did (200), or why it could not be done (409); the page shows it."""

    ok: bool = Field(description="Whether it was done.")
    message: str = Field(description="One line for the operator.")


async def agent_rows(
    api: InternalApi, view: SwarmView, liveness: LivenessReport
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """One row per agent (gateway principals and the orchestrator's agents) with its liveness (the
    state every view shows: ``gateway.swarm.liveness``), and the swarm usage."""
    agents = {a.name: a for a in liveness.agents}
    usage: dict[str, Any] = {}
    swarm_usage = None
    if has_route(api.app, USAGE_ROUTE):
        got = await api.get(USAGE_ROUTE)
        if got.ok:
            usage = got.json().get("agents", {})
            swarm_usage = got.json().get("swarm")
    doing: dict[str, Any] = {}
    if has_route(api.app, DOING_ROUTE):
        got = await api.get(DOING_ROUTE)
        doing = got.json() if got.ok else {}
    rows = []
    for name in sorted(agents):
        agent = agents[name]
        now_doing = doing.get(name) or {}
        rows.append(
            {
                "name": name,
                "disabled": agent.disabled,
                "state": agent.state,
                "reason": agent.reason,
                # The timeline's current (or last) tool call with its age; else what the heartbeat says.
                "doing": now_doing.get("text") or agent.doing,
                "running_tool": bool(now_doing.get("running")),
                "last_heartbeat": agent.last_heartbeat,
                "restarts": agent.restarts,
                "last_error": agent.last_error,
                "usage": usage.get(name),
                "actions": view.action_reasons(name, agent.disabled),
            }
        )
    return rows, swarm_usage


router = APIRouter(prefix="/ui")


@router.get("/agents", response_class=HTMLResponse, summary="Agents: state, heartbeats, usage, actions")
async def agents(ui: UiSvc, request: Request, user: UiDep) -> HTMLResponse:
    view = await ui.control.view()
    rows, swarm_usage = await agent_rows(ui.api(user), view, await liveness_book(ui.ctx).report())
    return ui.page(
        "agents.html",
        request,
        user,
        "agents",
        rows=rows,
        view=view,
        usage_available=has_route(request.app, USAGE_ROUTE),
        swarm_usage=swarm_usage,
    )


@router.get("/agents/{name}/memory", response_class=HTMLResponse, summary="An agent's memory")
async def memory(ui: UiSvc, request: Request, name: str, user: UiDep) -> HTMLResponse:
    try:
        view = await ui.control.memory(name)
        error = ""
    except SwarmUnavailable as exc:
        view, error = None, str(exc)
    return ui.page("memory.html", request, user, "agents", name=name, memory=view, error=error)


@router.post(
    "/agents/{name}/{action}",
    response_model=ActionResult,
    responses={
        400: {"model": ActionResult, "description": "A body that is not a control request's"},
        409: {"model": ActionResult, "description": "Cannot be done now; message says why"},
    },
    summary="restart, quarantine, release, snapshot, rollback or reset (through the control stream)",
)
async def act(ui: UiSvc, request: Request, name: str, action: ControlAction, user: ActingDep) -> JSONResponse:
    try:
        body = ControlBody.model_validate_json(await request.body() or b"{}")
    except ValidationError as exc:
        problem = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors())
        return JSONResponse(ActionResult(ok=False, message=problem).model_dump(), status_code=400)
    if action == ControlAction.snapshot and not body.label:
        body.label = "ui"
    try:
        ticket = await ui.control.actions.perform(name, action, user.principal.name, body)
    except SwarmUnavailable as exc:
        ui.metrics.actions.labels(action=action.value, outcome="refused").inc()
        return JSONResponse(ActionResult(ok=False, message=str(exc)).model_dump(), status_code=409)
    ui.metrics.actions.labels(action=action.value, outcome="done").inc()
    return JSONResponse(ActionResult(ok=True, message=ticket.message).model_dump())


def make_source_page(panel: str) -> Any:
    label, prefixes, extras = SOURCES[panel]

    async def page(ui: UiSvc, request: Request, user: UiDep) -> HTMLResponse:
        paths = [p for prefix in prefixes for p in get_routes(request.app, prefix)]
        tables: list[Table] = []
        errors: list[str] = []
        api = ui.api(user)
        for path in paths:
            reply = await api.get(path)
            if reply.ok:
                tables += tabulate(path, reply.json())
            else:
                errors.append(f"GET {path}: {reply.status} {reply.detail}")
        services = [k for k in extras if k in ui.ctx.services.names()]
        return ui.page(
            "source.html",
            request,
            user,
            panel,
            title=panel.title(),
            label=label,
            prefixes=prefixes,
            paths=paths,
            services=services,
            tables=tables,
            errors=errors,
        )

    return page


for panel in SOURCES:
    router.add_api_route(
        f"/{panel}",
        make_source_page(panel),
        methods=["GET"],
        response_class=HTMLResponse,
        summary=f"{panel.title()}: whatever the {SOURCES[panel][0]} publishes",
    )
