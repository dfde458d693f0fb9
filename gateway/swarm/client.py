"""``/api/swarm`` from another process, typed with the seam's models: what ``kswarm agent restart|
quarantine|release|memory`` use on a machine that does not share the orchestrator's home.

Synchronous, over a ``gateway.client.http.GatewayClient`` (an operator's); its ``GatewayCallError`` says why
a call failed (a ``409`` carries the gateway's or the supervisor's reason).
"""

from __future__ import annotations

import time
from typing import Any

from gateway.swarm.models import (
    AgentStatus,
    ControlAction,
    ControlBody,
    ControlTicket,
    MemorySummary,
    SwarmReport,
)

POLL_S = 0.2


class SwarmApi:
    """The swarm routes of one gateway, as the operator behind ``client``."""

    def __init__(self, client: Any) -> None:
        self.client = client  # a GatewayClient: request(method, path, **httpx options) -> parsed JSON

    def report(self) -> SwarmReport:
        return SwarmReport.model_validate(self.client.request("GET", "/api/swarm"))

    def memory(self, name: str) -> MemorySummary:
        return MemorySummary.model_validate(self.client.request("GET", f"/api/swarm/agents/{name}/memory"))

    def act(
        self, name: str, action: ControlAction, body: ControlBody | None = None, wait_s: float = 15.0
    ) -> ControlTicket:
        """Post ``action``: the supervisor's answer, or a ``queued`` ticket if none came in ``wait_s``."""
        reply = self.client.request(
            "POST",
            f"/api/swarm/agents/{name}/{action.value}",
            params={"wait": wait_s},
            json=(body or ControlBody()).model_dump(),
            timeout=wait_s + 30,
        )
        return ControlTicket.model_validate(reply)

    def ticket(self, request_id: str) -> ControlTicket:
        return ControlTicket.model_validate(self.client.request("GET", f"/api/swarm/requests/{request_id}"))

    def agent(self, name: str) -> AgentStatus | None:
        return next((a for a in self.report().agents if a.name == name), None)

    def restart(self, name: str, wait_s: float = 30.0) -> AgentStatus | None:
        """Restart ``name`` and wait until the published record shows a new run; None if not in time."""
        before = self.agent(name)
        started = before.started_at if before else None
        deadline = time.monotonic() + wait_s
        self.act(name, ControlAction.restart, wait_s=min(wait_s, 15.0))
        while time.monotonic() < deadline:
            now = self.agent(name)
            if now is not None and now.running and now.started_at != started:
                return now
            time.sleep(POLL_S)
        return None
