"""The orchestrator as the Agents panel sees it: what the supervisor published in Redis, and its actions.

No file and no module of the orchestrator is touched here: the supervisor publishes its view on every
pass (``gateway.swarm.board``) and takes requests from the control stream; the gateway does its own
half of an action (tokens) itself (``gateway.swarm.actions``). A gateway that does not share the
orchestrator's ``$KSWARM_HOME`` (compose) therefore shows and controls the swarm all the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.principals import PrincipalStore
from gateway.redis_facade import StrRedis
from gateway.swarm.actions import SwarmActions, SwarmRefusal, is_held, refusal
from gateway.swarm.board import SwarmBoard
from gateway.swarm.models import AgentStatus, ControlAction, MemorySummary, SwarmReport

ACTIONS = ("restart", "quarantine", "release", "memory")

SwarmUnavailable = SwarmRefusal  # what the panel routes catch: the message is shown as it is


@dataclass
class SwarmView:
    """One look at the published swarm, shaped for the Agents page."""

    available: bool
    report: SwarmReport
    reason: str = ""  # why the orchestrator's data/actions are unavailable
    swarm: str | None = None
    backend: str | None = None
    supervised: bool = False
    agents: list[str] = field(default_factory=list)
    records: dict[str, AgentStatus] = field(default_factory=dict)

    @classmethod
    def of(cls, report: SwarmReport) -> SwarmView:
        if report.status is None:
            return cls(False, report, report.reason)
        return cls(
            True,
            report,
            report.reason,
            swarm=report.status.swarm,
            backend=report.status.backend,
            supervised=report.supervising,
            agents=list(report.status.agents),
            records={a.name: a for a in report.agents},
        )

    def action_reasons(self, name: str, disabled: bool) -> dict[str, str | None]:
        """For each action on ``name``: None when it can be done, else why not (a tooltip)."""
        if not self.available:
            return dict.fromkeys(ACTIONS, self.reason)
        if name not in self.agents:
            why = f"{name} is not an agent of swarm {self.swarm} (not managed by the orchestrator)"
            return dict.fromkeys(ACTIONS, why)
        held = is_held(self.report, name, disabled)
        return {
            "restart": refusal(self.report, name, ControlAction.restart, disabled),
            "quarantine": "already quarantined" if held else None,
            "release": None if held else "not quarantined",
            "memory": None,
        }


class SwarmControl:
    """The Agents panel's access to the swarm seam, on the gateway's Redis."""

    def __init__(self, redis: StrRedis, principals: PrincipalStore) -> None:
        self.board = SwarmBoard(redis)
        self.actions = SwarmActions(self.board, principals)

    async def view(self) -> SwarmView:
        return SwarmView.of(await self.board.report())

    async def memory(self, name: str) -> MemorySummary:
        """The published memory of ``name``; ``SwarmUnavailable`` says why there is none."""
        view = await self.view()
        if not view.available:
            raise SwarmUnavailable(view.reason)
        if name not in view.agents:
            raise SwarmUnavailable(f"{name} is not an agent of swarm {view.swarm}")
        summary = await self.board.memory(name)
        if summary is None:
            raise SwarmUnavailable(f"the orchestrator has not published {name}'s memory yet")
        if summary.error:
            raise SwarmUnavailable(summary.error)
        return summary
