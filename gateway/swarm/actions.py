"""The operator's actions on agents, shared by the REST routes and the UI: the gateway's half (tokens),
then a control request for the supervisor's half (processes, files), and its answer.
"""

from __future__ import annotations

import time

from gateway.principals import PrincipalKind, PrincipalStore
from gateway.swarm.board import NO_SUPERVISOR, SwarmBoard
from gateway.swarm.models import (
    NEEDS_SUPERVISOR,
    ControlAction,
    ControlBody,
    ControlRequest,
    ControlTicket,
    ReplyStatus,
    SwarmReport,
)

DEFAULT_WAIT_S = 10.0


class SwarmRefusal(RuntimeError):
    """The action cannot be done (HTTP 409); the message says why, for the operator."""

    def __init__(self, message: str, ticket: ControlTicket | None = None) -> None:
        super().__init__(message)
        self.ticket = ticket


def is_held(report: SwarmReport, name: str, disabled: bool) -> bool:
    """Quarantined: held by the supervisor, or its principal disabled (a quarantine not yet taken)."""
    return disabled or any(a.name == name and a.quarantined for a in report.agents)


def refusal(report: SwarmReport, name: str, action: ControlAction, disabled: bool) -> str | None:
    """Why ``action`` on ``name`` cannot be done now, or None."""
    if not report.known or report.status is None:
        return report.reason
    if name not in report.status.agents:
        return f"{name} is not an agent of swarm {report.status.swarm} (not managed by the orchestrator)"
    if action in NEEDS_SUPERVISOR and not report.supervising:
        return NO_SUPERVISOR
    held = is_held(report, name, disabled)
    if action == ControlAction.restart and held:
        return f"{name} is quarantined: release it first"
    if action == ControlAction.release and not held:
        return f"{name} is not quarantined"
    return None


def _line(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


class SwarmActions:
    """``perform``: check, do the gateway's half, post the request, wait briefly for the answer."""

    def __init__(self, board: SwarmBoard, principals: PrincipalStore) -> None:
        self.board = board
        self.principals = principals

    async def perform(
        self,
        name: str,
        action: ControlAction,
        requester: str,
        body: ControlBody | None = None,
        wait_s: float = DEFAULT_WAIT_S,
    ) -> ControlTicket:
        """Raises ``SwarmRefusal`` when refused (by the gateway or by the supervisor's answer)."""
        principal = await self.principals.get(name)
        if principal is not None and principal.kind != PrincipalKind.agent:
            raise SwarmRefusal(f"{name} is a {principal.kind.value}, not an agent")
        report = await self.board.report()
        why = refusal(report, name, action, principal is not None and principal.disabled)
        if why:
            raise SwarmRefusal(why)
        done_here = ""
        if action == ControlAction.quarantine and principal is not None:
            # Disabled first: a token the supervisor might mint before it takes the request is refused too.
            await self.principals.set_disabled(name, True)
            revoked = await self.principals.revoke_tokens(name)
            done_here = f"quarantined {name}: {revoked} token(s) revoked"
        elif action == ControlAction.release and principal is not None:
            await self.principals.set_disabled(name, False)
        fields = (body or ControlBody()).model_dump()
        request = ControlRequest(
            action=action, agent=name, requester=requester, requested_at=time.time(), **fields
        )
        request_id = await self.board.submit(request)

        def ticket(status: ReplyStatus, message: str) -> ControlTicket:
            return ControlTicket(
                request_id=request_id, agent=name, action=action, status=status, message=message
            )

        if not report.supervising:
            later = f"{NO_SUPERVISOR}: it takes request {request_id} when it starts"
            return ticket(ReplyStatus.queued, _line(done_here, later))
        reply = await self.board.wait_reply(request_id, wait_s)
        if reply is None:
            waiting = (
                f"{action.value} of {name} requested (request {request_id}); "
                "the orchestrator has not answered yet"
            )
            return ticket(ReplyStatus.queued, _line(done_here, waiting))
        answered = ticket(reply.status, _line(done_here, reply.message))
        if reply.status != ReplyStatus.done:
            raise SwarmRefusal(answered.message, answered)
        return answered

    async def ticket(self, request_id: str) -> ControlTicket | None:
        """A posted request's state: its answer, or queued while the stream holds it unanswered."""
        reply = await self.board.reply(request_id)
        if reply is not None:
            return ControlTicket(
                request_id=request_id,
                agent=reply.agent,
                action=reply.action,
                status=reply.status,
                message=reply.message,
            )
        request = await self.board.request(request_id)
        if request is None:
            return None
        return ControlTicket(
            request_id=request_id,
            agent=request.agent,
            action=request.action,
            status=ReplyStatus.queued,
            message="not answered yet",
        )
