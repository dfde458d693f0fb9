"""``kswarm agent restart|quarantine|release|memory ...`` where this machine does not share the
orchestrator's home (no ``swarm/swarm.json`` under ``--home``): the same actions through the gateway's
``/api/swarm`` routes, answered by the supervisor over the control stream (docs/orchestrator.md).

Where the home is shared, ``orchestrator.cli.agent`` acts on its files itself (that works with no
gateway and no running supervisor too); these return what the command prints (``agent.py`` prints it,
as words or ``--json``), the same either way. A refusal (``409``:
quarantined, no orchestrator, no such snapshot) is a ``GatewayCallError``, which ``commands.command`` prints
as one line with its exit code.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from gateway.client import kswarm_home
from gateway.swarm.client import SwarmApi
from gateway.swarm.models import ControlAction, ControlBody, MemorySummary, ReplyStatus
from orchestrator.cli.commands import connect
from orchestrator.cli.output import fail
from orchestrator.supervisor.operations import SwarmInfo
from orchestrator.swarm_dir.provision import SwarmLayout

ANSWER_WAIT_S = 15.0


def shares_home(home: Path | None) -> bool:
    """Whether the orchestrator's home is here (its ``swarm.json``): then the local commands apply."""
    return SwarmInfo.load(SwarmLayout(kswarm_home(home))) is not None


def _act(home: Path | None, name: str, action: ControlAction, body: ControlBody | None = None) -> str:
    with connect(home) as gateway:
        ticket = SwarmApi(gateway).act(name, action, body, ANSWER_WAIT_S)
    if ticket.status == ReplyStatus.queued:
        return f"{ticket.message} (its answer: GET /api/swarm/requests/{ticket.request_id})"
    return ticket.message


def _body(**fields: object) -> ControlBody:
    try:
        return ControlBody.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        fail(f"bad {'.'.join(map(str, first['loc']))}: {first['msg']}", 2)


def restart(home: Path | None, name: str, wait: float) -> str:
    """The agent's new run (pid or container), once the supervisor restarted it."""
    with connect(home) as gateway:
        now = SwarmApi(gateway).restart(name, wait)
    if now is None:
        fail(f"{name} was asked to restart but is not running again after {wait:g}s (see kswarm ps)")
    return now.ref


def quarantine(home: Path | None, name: str) -> str:
    return _act(home, name, ControlAction.quarantine)


def release(home: Path | None, name: str) -> str:
    return _act(home, name, ControlAction.release)


def memory_show(home: Path | None, name: str) -> MemorySummary:
    with connect(home) as gateway:
        view = SwarmApi(gateway).memory(name)
    if view.error:
        fail(view.error)
    return view


def memory_snapshot(home: Path | None, name: str, label: str) -> str:
    """The new snapshot's id."""
    message = _act(home, name, ControlAction.snapshot, _body(label=label))
    # "saved snapshot <id> of <name>'s memory": the id alone, as the local command has it.
    words = message.split()
    return words[2] if message.startswith("saved snapshot ") and len(words) > 2 else message


def memory_rollback(home: Path | None, name: str, to: str | None, restart_it: bool) -> str:
    return _act(home, name, ControlAction.rollback, _body(snapshot=to, restart=restart_it))


def memory_reset(home: Path | None, name: str, restart_it: bool) -> str:
    return _act(home, name, ControlAction.reset, _body(restart=restart_it))
