"""The Tasks panel: the board (state, holder, lease time left, claims), the claims history (windows the
monitor saw open and close: done, released, lapsed, taken), and the operator's task actions — post,
release, reassign — through the audited ``/api/actions/tasks`` routes."""

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from gateway.ui.deps import UiDep
from gateway.ui.internal import has_route
from gateway.ui.service import UiService

TASKS_ROUTE = "/api/tasks"


def build_tasks_pages(ui: UiService) -> APIRouter:
    router = APIRouter(prefix="/ui")

    @router.get("/tasks", response_class=HTMLResponse, summary="Tasks: the board, holders, leases, claims")
    async def tasks(
        request: Request,
        user: UiDep,
        state: Annotated[str | None, Query(pattern="^(open|claimed|done)$")] = None,
    ) -> HTMLResponse:
        api = ui.api(user)
        available = has_route(ui.app, TASKS_ROUTE)
        board: list[dict[str, Any]] = []
        claims: list[dict[str, Any]] = []
        errors: list[str] = []
        if available:
            reply = await api.get(TASKS_ROUTE)
            if reply.ok:
                board = reply.json()
            else:
                errors.append(f"GET {TASKS_ROUTE}: {reply.status} {reply.detail}")
        monitored = has_route(ui.app, "/api/monitor/claims")
        if monitored:
            got = await api.get("/api/monitor/claims", limit=100)
            claims = got.json() if got.ok else []
        agents = await api.get("/api/agents")
        names = sorted(a["name"] for a in (agents.json() if agents.ok else []) if a.get("kind") == "agent")
        order = {"claimed": 0, "open": 1, "done": 2}
        board.sort(key=lambda t: (order.get(t.get("state", ""), 3), t.get("id", "")))
        return ui.page(
            "tasks.html",
            request,
            user,
            "tasks",
            available=available,
            monitored=monitored,
            board=[t for t in board if state in (None, t.get("state"))],
            state=state,
            claims=claims,
            agents=names,
            errors=errors,
            counts={s: sum(1 for t in board if t.get("state") == s) for s in ("open", "claimed", "done")},
        )

    return router
