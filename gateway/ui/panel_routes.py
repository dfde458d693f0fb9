"""The Agents, PRs and Dataset panels, and the operator's actions on agents (Jobs: ``jobs_routes``)."""

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel, Field

from gateway.principals import PrincipalKind
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


class Rollback(BaseModel):
    snapshot: str = Field(description="Snapshot id to restore.")


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
                "orch_state": (rec or {}).get("state") if view.available else None,
                "agent_state": info.get("state"),
                "doing": info.get("doing") or "",
                "last_heartbeat": info.get("last_heartbeat") or (rec or {}).get("last_heartbeat"),
                "restarts": (rec or {}).get("restarts"),
                "started_at": (rec or {}).get("started_at"),
                "last_error": (rec or {}).get("last_error") or "",
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
        view = await asyncio.to_thread(ui.control.view)
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
            view = await asyncio.to_thread(ui.control.memory, name)
            error = ""
        except SwarmUnavailable as exc:
            view, error = None, str(exc)
        return ui.page("memory.html", request, user, "agents", name=name, memory=view, error=error)

    @router.post(
        "/agents/{name}/{action}",
        response_model=ActionResult,
        responses={409: {"model": ActionResult, "description": "Cannot be done now; message says why"}},
        summary="restart, quarantine, release, snapshot or rollback",
    )
    async def act(request: Request, name: str, action: str, user: Acting) -> JSONResponse:
        try:
            message = await perform(ui, request, name, action)
        except SwarmUnavailable as exc:
            ui.metrics.actions.labels(action=action, outcome="refused").inc()
            return JSONResponse(ActionResult(ok=False, message=str(exc)).model_dump(), status_code=409)
        ui.metrics.actions.labels(action=action, outcome="done").inc()
        return JSONResponse(ActionResult(ok=True, message=message).model_dump())

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
            raise HTTPException(reply.status, reply.detail)
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
        services = [k for k in extras if k in ui.ctx.extras]
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


async def perform(ui: UiService, request: Request, name: str, action: str) -> str:
    """Do ``action`` on agent ``name`` through the orchestrator's control files; a line for the operator."""
    control, principals = ui.control, ui.ctx.principals
    principal = await principals.get(name)
    if principal is not None and principal.kind != PrincipalKind.agent:
        raise SwarmUnavailable(f"{name} is a {principal.kind.value}, not an agent")
    if action == "restart":
        await asyncio.to_thread(control.request_restart, name)
        return f"restart of {name} requested; the orchestrator restarts it on its next pass"
    if action == "quarantine":
        await asyncio.to_thread(control.hold, name)  # first: the orchestrator must not restart it
        revoked = await principals.revoke_tokens(name)
        if principal is not None:
            await principals.set_disabled(name, True)
        return f"quarantined {name}: {revoked} token(s) revoked; the orchestrator stops it, files kept"
    if action == "release":
        if principal is not None:
            await principals.set_disabled(name, False)
        await asyncio.to_thread(control.unhold, name)
        return f"released {name}: the orchestrator gives it a fresh token and starts it"
    if action == "snapshot":
        snap = await asyncio.to_thread(control.snapshot, name)
        return f"saved snapshot {snap} of {name}'s memory"
    if action == "rollback":
        body = Rollback.model_validate_json(await request.body() or b"{}")
        restored, restarted = await asyncio.to_thread(control.rollback, name, body.snapshot)
        tail = "; restarting it to reread its memory" if restarted else ""
        return f"{name}'s memory rolled back to {restored} (the previous one saved first){tail}"
    raise HTTPException(404, f"unknown action {action!r}")
