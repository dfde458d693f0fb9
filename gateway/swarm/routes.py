"""REST routes of the swarm seam under ``/api/swarm`` (operator only): what the UI's Agents panel uses,
for scripts and for ``kswarm agent ...`` on a machine that does not share the orchestrator's home.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import JSONResponse

from gateway.deps import Ctx, OperatorOnly
from gateway.errors import GatewayError, NotFound
from gateway.models import Refusal
from gateway.swarm.actions import DEFAULT_WAIT_S, SwarmActions, SwarmRefusal
from gateway.swarm.board import REQUEST_ID, SwarmBoard
from gateway.swarm.models import (
    AgentName,
    ControlAction,
    ControlBody,
    ControlTicket,
    MemorySummary,
    ReplyStatus,
    SwarmReport,
)

Name = Annotated[AgentName, Path(description="Agent name.")]
MAX_WAIT_S = 60.0


async def swarm_actions(ctx: Ctx) -> SwarmActions:
    """The swarm seam on the gateway's Redis (stateless: one per request)."""
    return SwarmActions(SwarmBoard(ctx.redis), ctx.principals)


Actions = Annotated[SwarmActions, Depends(swarm_actions)]
router = APIRouter(prefix="/api/swarm", tags=["swarm"])


@router.get("", response_model=SwarmReport, summary="The swarm as its supervisor last published it")
async def swarm(actions: Actions, _: OperatorOnly) -> SwarmReport:
    return await actions.board.report()


@router.get(
    "/agents/{name}/memory",
    response_model=MemorySummary,
    responses={404: {"model": Refusal, "description": "No such agent, or no memory published yet"}},
    summary="An agent's memory: MEMORY.md, files, snapshots (as last published)",
)
async def memory(name: Name, actions: Actions, _: OperatorOnly) -> MemorySummary:
    report = await actions.board.report()
    if report.status is None or name not in report.status.agents:
        raise NotFound(f"no agent {name!r} in the swarm" if report.known else report.reason)
    summary = await actions.board.memory(name)
    if summary is None:
        raise NotFound(f"no memory of {name} published yet")
    return summary


@router.post(
    "/agents/{name}/{action}",
    response_model=ControlTicket,
    responses={
        202: {"model": ControlTicket, "description": "Posted; the supervisor has not answered yet"},
        409: {"model": Refusal, "description": "Cannot be done now (refused here or by the supervisor)"},
    },
    summary="Ask the supervisor to restart, quarantine, release, snapshot, roll back or reset an agent",
)
async def act(
    name: Name,
    action: ControlAction,
    actions: Actions,
    who: OperatorOnly,
    body: ControlBody | None = None,
    wait: Annotated[
        float, Query(ge=0, le=MAX_WAIT_S, description="Seconds to wait for the supervisor's answer.")
    ] = DEFAULT_WAIT_S,
) -> JSONResponse:
    try:
        ticket = await actions.perform(name, action, who.name, body, wait)
    except SwarmRefusal as exc:
        raise GatewayError(str(exc), 409) from None
    status = 202 if ticket.status == ReplyStatus.queued else 200
    return JSONResponse(ticket.model_dump(mode="json"), status_code=status)


@router.get(
    "/requests/{request_id}",
    response_model=ControlTicket,
    responses={404: {"model": Refusal, "description": "No such request (or its answer expired)"}},
    summary="A control request: queued, or the supervisor's answer",
)
async def request(
    request_id: Annotated[str, Path(pattern=REQUEST_ID, description="Control stream entry id.")],
    actions: Actions,
    _: OperatorOnly,
) -> ControlTicket:
    ticket = await actions.ticket(request_id)
    if ticket is None:
        raise NotFound(f"no control request {request_id}")
    return ticket
