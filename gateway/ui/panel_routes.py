"""The Agents, PRs and Dataset panels, and the operator's actions on agents (Jobs: ``jobs_routes``)."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel, Field, ValidationError

from gateway.errors import GatewayError
from gateway.swarm.models import ControlAction, ControlBody
from gateway.ui.auth import UiUser
from gateway.ui.internal import InternalApi, get_routes, has_route, segment
from gateway.ui.render import Table, tabulate
from gateway.ui.service import UiService
from gateway.ui.swarm import SwarmUnavailable, SwarmView

# Where the components that are built separately publish their data; the panels list every
# parameterless GET route under these prefixes, so a new endpoint shows up without a UI change.
# (The job runner has its own panel, gateway/ui/jobs_routes.py.)
SOURCES = {
    "dataset": ("dataset builder", ("/api/dataset",), ("dataset",)),
}
USAGE_ROUTE = "/api/usage"
FORGE_PULLS = "/api/forge/pulls"


class ActionResult(BaseModel):
    """What an action on an agent did (200), or why it could not be done (409); the page shows it."""

    ok: bool = Field(description="Whether it was done.")
    message: str = Field(description="One line for the operator.")


async def agent_rows(api: InternalApi, view: SwarmView) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """One row per agent (gateway principals and the orchestrator's agents), and the swarm usage."""
    reply = await api.get("/api/agents")
    agents = {a["name"]: a for a in (reply.json() if reply.ok else [])}
    usage: dict[str, Any] = {}
    swarm_usage = None
    if has_route(api.app, USAGE_ROUTE):
        got = await api.get(USAGE_ROUTE)
        if got.ok:
            usage = got.json().get("agents", {})
            swarm_usage = got.json().get("swarm")
    rows = []
    for name in sorted(set(agents) | set(view.agents)):
        info = agents.get(name, {})
        rec = view.records.get(name)
        disabled = bool(info.get("disabled"))
        rows.append(
            {
                "name": name,
                "known": bool(info),
                "disabled": disabled,
                "orch_state": rec.state if rec else None,
                "agent_state": info.get("state"),
                "doing": info.get("doing") or "",
                "last_heartbeat": info.get("last_heartbeat") or (rec.last_heartbeat if rec else None),
                "restarts": rec.restarts if rec else None,
                "started_at": rec.started_at if rec and rec.running else None,
                "last_error": rec.last_error if rec else "",
                "usage": usage.get(name),
                "actions": view.action_reasons(name, disabled),
            }
        )
    return rows, swarm_usage


def build_panel_router(ui: UiService) -> APIRouter:
    router = APIRouter(prefix="/ui")
    User = Annotated[UiUser, Depends(ui.auth.user)]
    Acting = Annotated[UiUser, Depends(ui.auth.csrf_user)]

    @router.get("/agents", response_class=HTMLResponse, summary="Agents: state, heartbeats, usage, actions")
    async def agents(request: Request, user: User) -> HTMLResponse:
        view = await ui.control.view()
        rows, swarm_usage = await agent_rows(ui.api(user), view)
        return ui.page(
            "agents.html",
            request,
            user,
            "agents",
            rows=rows,
            view=view,
            usage_available=has_route(ui.app, USAGE_ROUTE),
            swarm_usage=swarm_usage,
        )

    @router.get("/agents/{name}/memory", response_class=HTMLResponse, summary="An agent's memory")
    async def memory(request: Request, name: str, user: User) -> HTMLResponse:
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
    async def act(request: Request, name: str, action: ControlAction, user: Acting) -> JSONResponse:
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

    @router.get("/prs", response_class=HTMLResponse, summary="Pull requests with the gate's verdict")
    async def prs(request: Request, user: User, state: str = "all") -> HTMLResponse:
        pulls: list[dict[str, Any]] = []
        error = ""
        available = has_route(ui.app, FORGE_PULLS)
        if available:
            reply = await ui.api(user).get(FORGE_PULLS, state=state)
            if reply.ok:
                pulls = reply.json()
            else:
                error = reply.detail
        return ui.page(
            "prs.html", request, user, "prs", available=available, pulls=pulls, error=error, state=state
        )

    @router.get("/prs/{org}/{repo}/{number}", response_class=HTMLResponse, summary="One PR, with its diff")
    async def pr(request: Request, org: str, repo: str, number: int, user: User) -> HTMLResponse:
        path = f"/api/forge/repos/{segment(org)}/{segment(repo)}/pulls/{number}"
        reply = await ui.api(user).get(path, diff="true")
        if not reply.ok:
            raise GatewayError(reply.detail, reply.status)
        return ui.page("pr.html", request, user, "prs", pr=reply.json())

    for panel in SOURCES:
        router.add_api_route(
            f"/{panel}",
            make_source_page(ui, panel),
            methods=["GET"],
            response_class=HTMLResponse,
            summary=f"{panel.title()}: whatever the {SOURCES[panel][0]} publishes",
        )
    return router


def make_source_page(ui: UiService, panel: str) -> Any:
    label, prefixes, extras = SOURCES[panel]

    async def page(request: Request, user: Annotated[UiUser, Depends(ui.auth.user)]) -> HTMLResponse:
        paths = [p for prefix in prefixes for p in get_routes(ui.app, prefix)]
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
