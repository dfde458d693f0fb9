"""The Tasks panel: the board (state, holder, lease time left, claims), the claims history (windows the
monitor saw open and close: done, released, lapsed, taken, reassigned), the reassignments (from the
operators' audit log, ``GET /api/monitor/actions``), and the operator's task actions — post, release,
reassign — through the audited ``/api/actions/tasks`` routes."""

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from gateway.ui.deps import UiDep, UiSvc
from gateway.ui.internal import has_route

TASKS_ROUTE = "/api/tasks"
REASSIGN_ACTION = "task:reassign"
RELEASE_SLACK_S = 10.0  # a reassignment's forced release closes the claim window within this of its audit


def reassignments(actions: list[dict[str, Any]], claims: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The reassignments done, newest first, each with the agent that lost the claim (the claim window of
    its task released when it was audited) and that window marked ``reassigned``."""
    out: list[dict[str, Any]] = []
    for action in actions:
        if action.get("action") != REASSIGN_ACTION or action.get("outcome") != "done":
            continue
        ts = float(action.get("ts") or 0.0)
        lost = next(
            (
                c
                for c in claims
                if c.get("task") == action.get("target")
                and c.get("how") in ("released", "taken")  # "taken": closed once the new holder claimed
                and c.get("until") is not None
                and abs(float(c["until"]) - ts) <= RELEASE_SLACK_S
            ),
            None,
        )
        if lost is not None:
            lost["reassigned_to"] = action.get("detail")
        out.append(
            {
                "ts": ts,
                "task": action.get("target"),
                "to": action.get("detail"),
                "by": action.get("operator"),
                "from": lost["agent"] if lost is not None else "",
                "message": action.get("message") or "",
            }
        )
    return out


router = APIRouter(prefix="/ui")


@router.get("/tasks", response_class=HTMLResponse, summary="Tasks: the board, holders, leases, claims")
async def tasks(
    ui: UiSvc,
    request: Request,
    user: UiDep,
    state: Annotated[str | None, Query(pattern="^(open|claimed|done)$")] = None,
) -> HTMLResponse:
    api = ui.api(user)
    available = has_route(request.app, TASKS_ROUTE)
    board: list[dict[str, Any]] = []
    claims: list[dict[str, Any]] = []
    errors: list[str] = []
    if available:
        reply = await api.get(TASKS_ROUTE)
        if reply.ok:
            board = reply.json()
        else:
            errors.append(f"GET {TASKS_ROUTE}: {reply.status} {reply.detail}")
    monitored = has_route(request.app, "/api/monitor/claims")
    if monitored:
        got = await api.get("/api/monitor/claims", limit=100)
        claims = got.json() if got.ok else []
    audit = await api.get("/api/monitor/actions", limit=200) if monitored else None
    moved = reassignments(audit.json() if audit is not None and audit.ok else [], claims)
    last_move: dict[str, dict[str, Any]] = {}
    for move in reversed(moved):  # oldest first: the newest of each task wins
        last_move[move["task"]] = move
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
        reassigned=moved,
        last_move=last_move,
        agents=names,
        errors=errors,
        counts={s: sum(1 for t in board if t.get("state") == s) for s in ("open", "claimed", "done")},
    )
