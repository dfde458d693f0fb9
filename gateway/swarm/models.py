"""The typed contract between the supervisor and the gateway (stored as JSON under ``gateway.swarm.keys``).

The supervisor writes ``SupervisorBeat``, ``SwarmStatus``, ``AgentStatus`` and ``MemorySummary`` and
answers ``ControlRequest`` entries with a ``ControlReply``; the gateway reads the first four, writes
the requests and reads the replies. Either side validates what it reads with these models, so a
field renamed on one side is an error at the other, not a silently empty panel.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints

# The gateway's principal names (gateway/principals.py:NAME_RE): an agent's name is also a path
# component of its files, so nothing else may reach the supervisor.
AgentName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]{0,38}$")]
SnapshotLabel = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]{0,40}$")]

AgentState = Literal[
    "new", "starting", "running", "stalled", "backoff", "crash-loop", "quarantined", "failed"
]


class ControlAction(StrEnum):
    """What the operator may ask the supervisor to do to one agent."""

    restart = "restart"  # stop and start (not counted as a crash)
    quarantine = "quarantine"  # stop and keep stopped (the gateway revokes its tokens itself)
    release = "release"  # end a quarantine: a fresh token, then start
    snapshot = "snapshot"  # copy its memory to a new snapshot
    rollback = "rollback"  # restore a snapshot (the current memory saved first), then restart
    reset = "reset"  # memory down to the identity banner (saved first), then restart


# Actions that only make sense while a supervisor runs: the gateway refuses them otherwise. Quarantine
# and release are queued instead: the gateway's half (tokens) is done at once, the supervisor's when
# one takes the stream.
NEEDS_SUPERVISOR = frozenset(
    {ControlAction.restart, ControlAction.snapshot, ControlAction.rollback, ControlAction.reset}
)


class ReplyStatus(StrEnum):
    queued = "queued"  # posted, not answered yet
    done = "done"
    refused = "refused"  # not done, and why (unknown agent, no such snapshot, quarantined, ...)
    failed = "failed"  # tried and broke (the message says how)


class SupervisorBeat(BaseModel):
    """The supervisor's heartbeat; its key expires ``ttl_s`` after the last beat, so a supervisor that
    died (even ``kill -9``) is seen as gone."""

    owner: str = Field(description="Which swarm home holds the seam: '<swarm>@<path of swarm dir>'.")
    swarm: str = Field(description="Swarm name.")
    pid: int = Field(description="The supervisor's pid (on its own host).")
    host: str = Field(description="The supervisor's host name.")
    started_at: float = Field(description="Unix time the supervisor started.")
    beat_at: float = Field(description="Unix time of this beat.")
    last_pass_at: float | None = Field(None, description="Unix time the last reconcile pass ended.")
    ttl_s: float = Field(description="Seconds this beat stays valid without the next one.")


class SwarmStatus(BaseModel):
    """Which swarm reports here; kept after the supervisor is gone (its last known view)."""

    swarm: str = Field(description="Swarm name.")
    backend: str = Field(description="process or docker.")
    agents: list[str] = Field(description="The spec's agents, in spec order.")
    supervisor_pid: int = Field(description="Pid of the supervisor that published this.")
    started_at: float = Field(description="Unix time that supervisor started.")
    published_at: float = Field(description="Unix time of this view.")


class AgentStatus(BaseModel):
    """One agent as the supervisor sees it (what ``kswarm ps`` and the Agents panel show)."""

    name: str = Field(description="Agent name.")
    state: AgentState = Field(description="Lifecycle state (orchestrator/supervisor/reconcile.py).")
    running: bool = Field(description="Whether the backend runs it right now.")
    ref: str = Field("", description="Process id or container id; empty when not running.")
    uid: int | None = Field(None, description="The uid it runs as.")
    started_at: float | None = Field(None, description="Unix time of the current run's start (uptime).")
    restarts: int = Field(0, description="Restarts by the orchestrator (crashes and requests).")
    last_exit: int | None = Field(None, description="Exit status of the last run, when known.")
    last_error: str = Field("", description="Why the last start failed, if it did.")
    last_output: str = Field(
        "", description="The last error line its last run wrote before it exited (its log), if it crashed."
    )
    last_heartbeat: float | None = Field(None, description="Last heartbeat the supervisor saw.")
    next_start_at: float | None = Field(None, description="When a backed-off restart is due.")
    quarantined: bool = Field(False, description="Held stopped by the supervisor.")


class MemorySummary(BaseModel):
    """An agent's memory dir, read without following a link the agent planted (bounded: it writes it)."""

    memory_md: str = Field("", description="MEMORY.md (empty if missing or a link), cut at the limit.")
    memory_md_truncated: bool = Field(False, description="MEMORY.md is longer than what is shown.")
    files: list[tuple[str, int]] = Field(
        default_factory=list, description="Relative path and size in bytes (-1: a symlink, not followed)."
    )
    files_truncated: bool = Field(False, description="More files than listed.")
    snapshots: list[str] = Field(default_factory=list, description="Snapshot ids, oldest first.")
    error: str = Field("", description="Why the memory could not be read (no dir yet, a link), if so.")


class ControlBody(BaseModel):
    """What an operator's request may carry besides the action and the agent (both from the URL).

    Anything else in the body -- a ``requester``, another ``agent`` or ``action`` -- is ignored: who
    asks comes from the token, whom and what from the path."""

    snapshot: str | None = Field(
        None, max_length=200, description="rollback: the snapshot id to restore (default: the latest)."
    )
    label: SnapshotLabel = Field("", description="snapshot: a suffix for the new snapshot's id.")
    restart: bool = Field(True, description="rollback/reset: restart the agent so that it rereads memory.")


class ControlRequest(ControlBody):
    """One entry of the control stream (``ks:swarm:control``, field ``request``)."""

    action: ControlAction = Field(description="What to do.")
    agent: AgentName = Field(description="To which agent.")
    requester: str = Field(description="The principal that asked (from its token, never from a body).")
    requested_at: float = Field(description="Unix time the gateway took the request.")


class ControlReply(BaseModel):
    """The supervisor's answer to one control entry (``ks:swarm:reply:<id>``)."""

    request_id: str = Field(description="The control stream entry id.")
    agent: str = Field(description="The agent it was for ('' when the entry was unreadable).")
    action: ControlAction | None = Field(description="The action asked for (None: unreadable entry).")
    status: ReplyStatus = Field(description="done, refused or failed.")
    message: str = Field(description="One line for the operator.")
    answered_at: float = Field(description="Unix time of the answer.")


class ControlTicket(BaseModel):
    """What posting a request answers: its id and, once the supervisor answered, the answer."""

    request_id: str | None = Field(
        None, description="Control stream entry id (None: refused before posting)."
    )
    agent: str = Field(description="The agent.")
    action: ControlAction | None = Field(description="The action (None: an unreadable entry).")
    status: ReplyStatus = Field(description="queued until the supervisor answers; then its answer.")
    message: str = Field(description="One line for the operator.")


class SwarmReport(BaseModel):
    """``GET /api/swarm``: the last published view and whether a supervisor is alive now."""

    known: bool = Field(description="A supervisor has published a swarm here.")
    supervising: bool = Field(description="A supervisor's heartbeat is current.")
    reason: str = Field("", description="Why not known or not supervising, for the operator.")
    status: SwarmStatus | None = Field(None, description="The swarm (last published).")
    supervisor: SupervisorBeat | None = Field(None, description="The live supervisor's last beat.")
    agents: list[AgentStatus] = Field(
        default_factory=list, description="One record per agent, in spec order."
    )
