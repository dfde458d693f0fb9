"""An agent's liveness: the one state every view shows (Attention, the overview, the Agents page, the
agent's page, ``kswarm ps`` and ``kswarm agent list``), computed here and nowhere else.

Its inputs are the supervisor's published record (``gateway.swarm.board``: running or not, its
lifecycle state, restarts, the last exit and error), the agent's last heartbeat at the gateway
(``ks:heartbeat:<agent>``: when, and the state it reports) and whether its principal is disabled. One
threshold, ``stall_after_s`` (the monitor's ``KSWARM_MONITOR_STALL_AFTER_S``), decides *stalled*.

| state | when |
|---|---|
| ``quarantined`` | the principal is disabled or the supervisor holds it stopped |
| ``crash-looping`` | the supervisor sees it crash again and again (``crash-loop``), or it cannot start |
| ``stopped`` | not running: never started, stopped, or exited and waiting for its back-off restart |
| ``stalled`` | running, no heartbeat (or start) for over ``stall_after_s`` (or the supervisor says so) |
| ``starting`` | running, no heartbeat since it started, for less than ``stall_after_s`` |
| ``idle`` | heartbeating and reporting ``idle`` |
| ``running`` | heartbeating and reporting anything else (working) |

The CLI reads the result from ``GET /api/agents/liveness``; the UI and the monitor call ``LivenessBook``
in-process. Nothing else derives a state from these inputs.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, Field

from gateway import keys as gateway_keys
from gateway.context import GatewayContext
from gateway.principals import PrincipalKind, PrincipalStore
from gateway.redis_facade import StrRedis
from gateway.services import LIVENESS
from gateway.swarm.board import SwarmBoard
from gateway.swarm.models import AgentState, AgentStatus

Liveness = Literal["running", "idle", "starting", "stalled", "crash-looping", "quarantined", "stopped"]
LIVENESS_STATES: tuple[Liveness, ...] = (
    "running",
    "idle",
    "starting",
    "stalled",
    "crash-looping",
    "quarantined",
    "stopped",
)
DEFAULT_STALL_AFTER_S = 60.0
LOOPING = ("crash-loop", "failed")  # the supervisor's states that are a crash loop to the operator


class AgentLiveness(BaseModel):
    """One agent's computed state, with the inputs it was computed from (for the views' columns)."""

    name: str = Field(description="Agent name.")
    state: Liveness = Field(description="The computed liveness (gateway/swarm/liveness.py).")
    reason: str = Field("", description="Why it is in this state, in one line (the last error included).")
    since: float = Field(description="Unix time this state began, as far as known.")
    email: str = Field("", description="The agent's git e-mail ('' when only the orchestrator knows it).")
    disabled: bool = Field(False, description="Its principal's tokens are refused (quarantine).")
    supervised: bool = Field(False, description="The orchestrator published a record of it.")
    supervisor_state: AgentState | None = Field(None, description="The supervisor's lifecycle state.")
    backend: str | None = Field(None, description="process or docker (supervised agents).")
    uptime_s: float | None = Field(None, description="Seconds since the current run started.")
    restarts: int | None = Field(None, description="Restarts by the orchestrator (supervised agents).")
    last_exit: int | None = Field(None, description="Exit status of the last run, when known.")
    last_error: str = Field("", description="The last error: a failed start, or what the last run said.")
    last_heartbeat: float | None = Field(None, description="Unix time of its last heartbeat.")
    heartbeat_age_s: float | None = Field(None, description="Seconds since its last heartbeat.")
    reported: str | None = Field(None, description="The state the agent itself last reported.")
    doing: str = Field("", description="What the agent last said it was doing.")


class LivenessReport(BaseModel):
    """``GET /api/agents/liveness``: every agent (principals and the swarm's agents), by name."""

    computed_at: float = Field(description="Unix time of the computation.")
    stall_after_s: float = Field(description="The threshold of 'stalled' used.")
    swarm_known: bool = Field(description="A supervisor has published the swarm here.")
    supervising: bool = Field(description="A supervisor's heartbeat is current.")
    note: str = Field("", description="Why the supervisor's part is missing or old, if it is.")
    agents: list[AgentLiveness] = Field(default_factory=list, description="One per agent, by name.")


def error_of(record: AgentStatus) -> str:
    """The record's last error: why a start failed, else the last line the last run wrote."""
    return record.last_error or record.last_output


def agent_liveness(
    name: str,
    record: AgentStatus | None,
    beat: dict[str, Any],
    disabled: bool,
    now: float,
    stall_after_s: float,
    backend: str | None = None,
    email: str = "",
) -> AgentLiveness:
    """The one rule (see the module's table). ``beat``: the heartbeat hash (``ts``, ``state``, ``doing``)."""
    beat_at = float(beat["ts"]) if beat.get("ts") else None
    base = AgentLiveness(
        name=name,
        state="stopped",
        since=now,
        email=email,
        disabled=disabled,
        supervised=record is not None,
        supervisor_state=record.state if record else None,
        backend=backend if record else None,
        uptime_s=round(now - record.started_at, 1)
        if record and record.running and record.started_at
        else None,
        restarts=record.restarts if record else None,
        last_exit=record.last_exit if record else None,
        last_error=error_of(record) if record else "",
        last_heartbeat=beat_at,
        heartbeat_age_s=round(now - beat_at, 1) if beat_at else None,
        reported=beat.get("state") or None,
        doing=str(beat.get("doing") or ""),
    )
    state, reason, since = _classify(record, beat_at, base.reported, disabled, now, stall_after_s)
    return base.model_copy(update={"state": state, "reason": reason, "since": since})


def _exits(record: AgentStatus) -> str:
    parts = [f"{record.restarts} restart(s)"]
    if record.last_exit is not None:
        parts.append(f"last exit {record.last_exit}")
    if error_of(record):
        parts.append(f"last error: {error_of(record)}")
    return "; ".join(parts)


def _classify(
    record: AgentStatus | None,
    beat_at: float | None,
    reported: str | None,
    disabled: bool,
    now: float,
    stall_after_s: float,
) -> tuple[Liveness, str, float]:
    if disabled or (record is not None and (record.quarantined or record.state == "quarantined")):
        why = "stopped, tokens revoked, until an operator releases it"
        if record is not None and record.last_error:
            why += f" ({record.last_error})"
        return "quarantined", why, (record.last_heartbeat or now) if record else now
    if record is not None and not record.running:
        since = record.last_heartbeat or record.started_at or now
        if record.state in LOOPING:
            verb = (
                "it keeps exiting soon after each start"
                if record.state == "crash-loop"
                else "could not start"
            )
            return "crash-looping", f"{verb}; {_exits(record)}", since
        if record.state == "backoff":
            due = f" in {max(0.0, record.next_start_at - now):.0f} s" if record.next_start_at else ""
            return "stopped", f"exited; restarted after a back-off{due}; {_exits(record)}", since
        return "stopped", "not running (the orchestrator starts it on its next pass)", since
    # Running (the supervisor says so), or not supervised here: its heartbeat decides.
    started = record.started_at if record is not None else None
    last = max(t for t in (beat_at, started) if t is not None) if (beat_at or started) else None
    if last is None:
        return "stopped", "no heartbeat ever, and no orchestrator runs it here", now
    silent = now - last
    if silent > stall_after_s:
        what = (
            "no heartbeat"
            if beat_at and (started is None or beat_at >= started)
            else "no heartbeat since start"
        )
        return "stalled", f"{what} for {silent:.0f} s (threshold {stall_after_s:g} s)", last + stall_after_s
    if record is not None and record.state == "stalled":
        return "stalled", "the orchestrator saw no heartbeat within its own threshold", last
    if beat_at is None or (started is not None and beat_at < started):
        return "starting", "started; no heartbeat yet", started or now
    if (reported or "idle") == "idle":
        return "idle", "heartbeating, waiting for work", beat_at
    return "running", f"heartbeating, reports {reported}", beat_at


class LivenessBook:
    """Computes ``LivenessReport`` from the gateway's Redis (heartbeats, principals, the swarm board)."""

    def __init__(self, redis: StrRedis, principals: PrincipalStore, stall_after_s: float) -> None:
        self.redis = redis
        self.principals = principals
        self.board = SwarmBoard(redis)
        self.stall_after_s = stall_after_s

    async def report(self, now: float | None = None) -> LivenessReport:
        now = time.time() if now is None else now
        principals = {p.name: p for p in await self.principals.list(PrincipalKind.agent)}
        swarm = await self.board.report()
        records = {r.name: r for r in swarm.agents}
        names = sorted(set(principals) | set(records))
        async with self.redis.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hgetall(gateway_keys.heartbeat(name))
            beats: list[dict[str, Any]] = await pipe.execute()
        backend = swarm.status.backend if swarm.status else None
        agents = []
        for name, beat in zip(names, beats, strict=True):
            principal = principals.get(name)
            agents.append(
                agent_liveness(
                    name,
                    records.get(name),
                    beat or {},
                    bool(principal and principal.disabled),
                    now,
                    self.stall_after_s,
                    backend,
                    principal.email if principal else "",
                )
            )
        return LivenessReport(
            computed_at=now,
            stall_after_s=self.stall_after_s,
            swarm_known=swarm.known,
            supervising=swarm.supervising,
            note=swarm.reason,
            agents=agents,
        )

    async def by_name(self) -> dict[str, AgentLiveness]:
        return {a.name: a for a in (await self.report()).agents}


def liveness_book(ctx: GatewayContext) -> LivenessBook:
    """The monitor's book (its stall threshold) when the monitor is installed, else one with the default
    threshold: every view of one gateway computes with the same book either way."""
    return ctx.services.find(LIVENESS) or LivenessBook(ctx.redis, ctx.principals, DEFAULT_STALL_AFTER_S)
