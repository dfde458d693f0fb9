"""``kswarm agent ...``: principals at the gateway (``add``, ``list``) and a swarm's agents (``restart``,
``quarantine``, ``release``, ``memory show|snapshot|rollback|reset``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from gateway.client import GatewayCallError
from gateway.swarm.models import MemorySummary
from orchestrator.cli import agent_remote
from orchestrator.cli.agent_table import liveness_rows, print_agent_table
from orchestrator.cli.commands import HomeOpt, JsonOpt, command, connect
from orchestrator.cli.output import console, fail, print_json, safe
from orchestrator.cli.swarm import Name, load_ctx
from orchestrator.cli.timeline import timeline
from orchestrator.supervisor import memory as mem
from orchestrator.supervisor.operations import SupervisorLock, quarantine, release, request_restart
from orchestrator.swarm_dir.provision import SwarmLayout

RestartOpt = Annotated[
    bool, typer.Option("--restart/--no-restart", help="Restart the agent so that it rereads memory.")
]
Kind = Literal["agent", "operator", "worker", "gate"]


def supervised(layout: SwarmLayout) -> bool:
    return SupervisorLock(layout).held_elsewhere()


app = typer.Typer(
    help="Agents: add, list, and (with a swarm) restart, memory, quarantine.", no_args_is_help=True
)
memory_app = typer.Typer(
    help="Inspect, snapshot, roll back or reset an agent's memory.", no_args_is_help=True
)
app.add_typer(memory_app, name="memory")


# Principals at the gateway.
@command(app, "add")
def add(
    name: Annotated[str, typer.Argument(help="Agent name (a-z, 0-9, '-').")],
    kind: Annotated[Kind, typer.Option("--kind", help="agent, operator, worker or gate.")] = "agent",
    home: HomeOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the principal and token as JSON.")] = False,
) -> None:
    """Create a principal and print its token (shown once)."""
    with connect(home) as gateway:
        created = gateway.request("POST", "/api/principals", json={"name": name, "kind": kind})
    if as_json:
        print_json(created)
        return
    console.print(
        f"created {safe(created['kind'])} [bold]{safe(created['name'])}[/bold] <{safe(created['email'])}>"
    )
    console.print("token (shown once):")
    print(created["token"])


@command(app, "list")
def list_agents(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Every agent with its state as the gateway computes it (running, idle, starting, stalled,
    crash-looping, quarantined, stopped), uptime, restarts, heartbeat, tokens, cost and what it
    does: the table and JSON rows of `kswarm ps`."""
    with connect(home) as gateway:
        rows = liveness_rows(gateway)
    if as_json:
        print_json(rows, indent=1)
        return
    print_agent_table(rows)


# The commands that act on a running swarm's agents: on its files where the home's swarm.json is here,
# else through the gateway's /api/swarm (``agent_remote``).
@command(app, "restart")
def restart(
    name: Name,
    wait: Annotated[float, typer.Option(help="Seconds to wait for it.")] = 30,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Restart an agent (the orchestrator stops and starts it; not counted as a crash)."""
    ref = agent_remote.restart(home, name, wait) if not agent_remote.shares_home(home) else None
    if ref is None:
        ref = restart_here(home, name, wait)
    said(as_json, {"agent": name, "ref": ref, "message": f"restarted {name} ({ref})"})


@command(app, "quarantine")
def quarantine_cmd(name: Name, home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Stop an agent and revoke its token; its files and volumes stay for inspection."""
    if not agent_remote.shares_home(home):
        return said(as_json, {"agent": name, "message": agent_remote.quarantine(home, name)})
    ctx = load_ctx(home)
    ctx.agent(name)
    held = f"{name} is stopped and held, but its token could not be revoked"
    try:
        gateway = connect(ctx.home)
    except GatewayCallError as exc:  # no gateway: the agent is stopped all the same, that is the point
        quarantine(ctx.layout, ctx.runtime, None, name)
        fail(f"{held}: {exc.line()}", exc.exit_code)
    try:
        with gateway:
            revoked = quarantine(ctx.layout, ctx.runtime, gateway, name)
    except GatewayCallError as exc:
        fail(f"{held}: {exc.line()}", exc.exit_code)
    message = f"quarantined {name}: stopped, {revoked} token(s) revoked, files kept"
    said(as_json, {"agent": name, "revoked": revoked, "message": message})


@command(app, "release")
def release_cmd(name: Name, home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """End a quarantine: the orchestrator gives the agent a fresh token and starts it."""
    if not agent_remote.shares_home(home):
        return said(as_json, {"agent": name, "message": agent_remote.release(home, name)})
    ctx = load_ctx(home)
    ctx.agent(name)
    with connect(ctx.home) as gateway:
        release(ctx.layout, gateway, name)
    said(as_json, {"agent": name, "message": f"released {name}"})


# `agent timeline` lives in a module of its own: the timeline's paging and following.
command(app, "timeline")(timeline)


@command(memory_app, "show")
def memory_show(name: Name, home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Print MEMORY.md, the memory files and the snapshots."""
    view = agent_remote.memory_show(home, name) if not agent_remote.shares_home(home) else None
    if view is None:
        ctx = load_ctx(home)
        ctx.agent(name)  # an unknown agent is not found (exit 4), not an unreadable memory
        try:
            here = mem.show(ctx.layout, name)
        except mem.MemoryOpError as exc:
            fail(str(exc))
        view = MemorySummary(memory_md=here.memory_md, files=here.files, snapshots=here.snapshots)
    if as_json:
        print_json({"agent": name, **view.model_dump(exclude={"error"})})
        return
    print_memory(view)


@command(memory_app, "snapshot")
def memory_snapshot(
    name: Name,
    label: Annotated[str, typer.Option(help="Suffix for the id.")] = "",
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Save a snapshot of the agent's memory."""
    if not agent_remote.shares_home(home):
        snap = agent_remote.memory_snapshot(home, name, label)
    else:
        ctx = load_ctx(home)
        ctx.agent(name)
        try:
            snap = mem.snapshot(ctx.layout, name, label)
        except mem.MemoryOpError as exc:
            fail(str(exc))
    said(as_json, {"agent": name, "snapshot": snap, "message": snap})


@command(memory_app, "rollback")
def memory_rollback(
    name: Name,
    to: Annotated[str | None, typer.Option(help="Snapshot id; default the latest.")] = None,
    restart: RestartOpt = True,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Restore a snapshot (the current memory is snapshotted first)."""
    if not agent_remote.shares_home(home):
        return said(
            as_json, {"agent": name, "message": agent_remote.memory_rollback(home, name, to, restart)}
        )
    ctx = load_ctx(home)
    ctx.agent(name)
    try:
        restored = mem.rollback(ctx.layout, name, to)
    except mem.MemoryOpError as exc:
        fail(str(exc))
    if restart and supervised(ctx.layout):
        request_restart(ctx.layout, name)
    message = f"{name}: memory rolled back to {restored}"
    said(as_json, {"agent": name, "snapshot": restored, "message": message})


@command(memory_app, "reset")
def memory_reset(
    name: Name, restart: RestartOpt = True, home: HomeOpt = None, as_json: JsonOpt = False
) -> None:
    """Empty the memory down to the identity banner (snapshotted first)."""
    if not agent_remote.shares_home(home):
        return said(as_json, {"agent": name, "message": agent_remote.memory_reset(home, name, restart)})
    ctx = load_ctx(home)
    try:
        snap = mem.reset(ctx.layout, ctx.agent(name), ctx.info.swarm)
    except mem.MemoryOpError as exc:
        fail(str(exc))
    if restart and supervised(ctx.layout):
        request_restart(ctx.layout, name)
    message = f"{name}: memory reset (previous memory saved as snapshot {snap})"
    said(as_json, {"agent": name, "snapshot": snap, "message": message})


def restart_here(home: Path | None, name: str, wait: float) -> str:
    """Restart ``name`` through this home's files; its new run's ref (pid or container)."""
    ctx = load_ctx(home)
    ctx.agent(name)
    if not supervised(ctx.layout):
        fail("no orchestrator is running for this swarm (kswarm up)")
    before = ctx.runtime.status(name).started_at
    request_restart(ctx.layout, name)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        st = ctx.runtime.status(name)
        if st.running and st.started_at != before:
            return st.ref
        time.sleep(0.2)
    fail(f"{name} was asked to restart but is not running again after {wait:g}s (see kswarm ps)")


def said(as_json: bool, result: dict[str, Any]) -> None:
    """An agent action's result: its ``message`` (untrusted: the supervisor's words may carry the
    agent's), or with ``--json`` the whole result."""
    if as_json:
        print_json(result)
    else:
        typer.echo(safe(result["message"], markup=False))


def print_memory(view: MemorySummary) -> None:
    typer.echo(
        safe(view.memory_md.rstrip("\n"), markup=False)
        + ("\n(cut: longer than shown)" if view.memory_md_truncated else "")
    )
    typer.echo("\n-- files --")
    for rel, size in view.files:
        typer.echo(f"{safe(rel, markup=False)}  " + ("(symlink, not followed)" if size < 0 else f"{size} B"))
    if view.files_truncated:
        typer.echo("(more files than listed)")
    typer.echo("-- snapshots --\n" + ("\n".join(safe(s, markup=False) for s in view.snapshots) or "(none)"))
