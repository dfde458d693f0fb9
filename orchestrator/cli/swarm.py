"""The orchestrator's CLI commands: ``kswarm init|down|ps|logs`` and ``kswarm agent restart|memory|
quarantine|release``. ``register`` adds them to the ``kswarm`` app that ``orchestrator.cli`` owns.

They work from any terminal: the swarm is found through ``$KSWARM_HOME/swarm/swarm.json`` (written by
the supervisor), the gateway through ``$KSWARM_URL``/``$KSWARM_TOKEN`` or ``$KSWARM_HOME``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from gateway.client.http import GatewayClient, GatewayError, kswarm_home, target_from_env
from orchestrator import memory as mem
from orchestrator.provision import SwarmLayout
from orchestrator.runtime.base import AgentRuntime
from orchestrator.spec import AgentSpec, RuntimeOptions, SwarmSpec, template_text
from orchestrator.supervisor import (
    SupervisorLock,
    SwarmInfo,
    agent_rows,
    make_runtime,
    quarantine,
    release,
    request_restart,
    stop_supervisor,
    stop_swarm,
)

Name = Annotated[str, typer.Argument(help="Agent name.")]


@dataclass
class Ctx:
    """What every command needs: where the swarm lives, its spec and its backend."""

    home: Path
    layout: SwarmLayout
    info: SwarmInfo
    spec: SwarmSpec
    runtime: AgentRuntime

    def agent(self, name: str) -> AgentSpec:
        for agent in self.spec.expand():
            if agent.name == name:
                return agent
        if name in self.info.agents:
            return AgentSpec(
                name=name,
                role="agent",
                model="",
                runtime=RuntimeOptions(),
                resources=self.spec.defaults.resources,
            )
        fail(f"no agent {name!r} in swarm {self.info.swarm}")
        raise AssertionError  # unreachable


def fail(message: str, code: int = 1) -> None:
    typer.echo(f"kswarm: {message}", err=True)
    raise typer.Exit(code)


def load_ctx() -> Ctx:
    home = kswarm_home()
    layout = SwarmLayout(home)
    info = SwarmInfo.load(layout)
    if info is None:
        fail(f"no swarm in {home} (start one with: kswarm up -f swarm.yaml)")
    assert info is not None
    try:
        spec = SwarmSpec.model_validate(info.spec or {})
    except ValueError:  # an older swarm.json: enough of a spec to find the agents
        spec = SwarmSpec(swarm=info.swarm, agents=[{"name": n} for n in info.agents] or [{"name": "x"}])
    return Ctx(home, layout, info, spec, make_runtime(info.backend, layout, spec))


def gateway_client(home: Path) -> GatewayClient:
    return GatewayClient(target_from_env(home))


def supervised(layout: SwarmLayout) -> bool:
    return SupervisorLock(layout).held_elsewhere()


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def register(app: typer.Typer, agent_app: typer.Typer) -> None:
    """Add the orchestrator's commands to ``kswarm`` and ``kswarm agent``."""
    memory_app = typer.Typer(
        help="Inspect, snapshot, roll back or reset an agent's memory.", no_args_is_help=True
    )
    agent_app.add_typer(memory_app, name="memory")

    @app.command("init")
    def init(
        path: Annotated[Path, typer.Option("--file", "-f", help="Where to write the spec.")] = Path(
            "swarm.yaml"
        ),
        force: Annotated[bool, typer.Option(help="Overwrite an existing file.")] = False,
    ) -> None:
        """Write a commented swarm.yaml (2+ agents, the dataset repo, the cpu pool, a review policy)."""
        if path.exists() and not force:
            fail(f"{path} exists (use --force to overwrite)")
        path.write_text(template_text())
        typer.echo(f"wrote {path}; start the swarm with: kswarm up -f {path}")

    @app.command("down")
    def down(
        purge: Annotated[
            bool, typer.Option(help="Also delete agents' volumes, files and snapshots.")
        ] = False,
    ) -> None:
        """Stop the orchestrator and every agent of the swarm."""
        ctx = load_ctx()
        gateway_pid = None
        info_file = ctx.home / "gateway.json"
        if info_file.exists():
            gateway_pid = json.loads(info_file.read_text()).get("pid")
        if not stop_supervisor(ctx.layout, ctx.info.supervisor_pid or gateway_pid):
            fail("the orchestrator did not stop within 30s; agents left running")
        names = stop_swarm(ctx.layout, ctx.runtime, purge)
        typer.echo(
            f"stopped {len(names)} agent(s)" + (" and purged their files and volumes" if purge else "")
        )

    @app.command("ps")
    def ps(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
        """Agents with backend, state, uptime, restarts and last heartbeat."""
        ctx = load_ctx()
        beats: dict[str, float | None] = {}
        usage: dict[str, dict] = {}
        try:
            with gateway_client(ctx.home) as client:
                beats = {a["name"]: a.get("last_heartbeat") for a in client.agents()}
                # Tokens and cost from the gateway's LLM proxy (all agents: the CLI is the operator).
                usage = client.request("GET", "/api/usage").get("agents", {})
        except GatewayError as exc:
            typer.echo(f"(gateway not reachable: {exc.detail}; heartbeats from the last record)", err=True)
        rows = agent_rows(ctx.layout, ctx.runtime, beats)
        for r in rows:
            spent = usage.get(r["agent"], {})
            r["tokens"] = spent.get("total_tokens", 0)
            r["cost_usd"] = spent.get("cost_usd", 0.0)
        if as_json:
            typer.echo(json.dumps(rows, indent=1))
            return
        header = (
            f"{'AGENT':<20} {'BACKEND':<8} {'STATE':<12} {'UPTIME':>8} {'RESTARTS':>8} {'HEARTBEAT':>10}"
            f" {'TOKENS':>9} {'COST':>8}"
        )
        typer.echo(header)
        for r in rows:
            beat = _age(r["last_heartbeat_s"]) + (" ago" if r["last_heartbeat_s"] is not None else "")
            typer.echo(
                f"{r['agent']:<20} {r['backend']:<8} {r['state']:<12} {_age(r['uptime_s']):>8} "
                f"{r['restarts']:>8} {beat:>10} {r['tokens']:>9} {'$' + format(r['cost_usd'], '.4f'):>8}"
            )

    @app.command("logs")
    def logs(
        name: Name,
        follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
        tail: Annotated[int | None, typer.Option(help="Only the last N lines.")] = None,
    ) -> None:
        """An agent's output."""
        ctx = load_ctx()
        ctx.agent(name)
        try:
            for line in ctx.runtime.logs(name, follow=follow, tail=tail):
                typer.echo(line, nl=not line.endswith("\n"))
        except KeyboardInterrupt:
            pass

    @agent_app.command("restart")
    def restart(
        name: Name, wait: Annotated[float, typer.Option(help="Seconds to wait for it.")] = 30
    ) -> None:
        """Restart an agent (the orchestrator stops and starts it; not counted as a crash)."""
        ctx = load_ctx()
        ctx.agent(name)
        if not supervised(ctx.layout):
            fail("no orchestrator is running for this swarm (kswarm up)")
        before = ctx.runtime.status(name).started_at
        request_restart(ctx.layout, name)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            st = ctx.runtime.status(name)
            if st.running and st.started_at != before:
                typer.echo(f"restarted {name} ({st.ref})")
                return
            time.sleep(0.2)
        fail(f"{name} was asked to restart but is not running again after {wait:g}s (see kswarm ps)")

    @agent_app.command("quarantine")
    def quarantine_cmd(name: Name) -> None:
        """Stop an agent and revoke its token; its files and volumes stay for inspection."""
        ctx = load_ctx()
        ctx.agent(name)
        try:
            with gateway_client(ctx.home) as client:
                revoked = quarantine(ctx.layout, ctx.runtime, client, name)
        except GatewayError as exc:
            fail(f"{name} is stopped and held, but its token could not be revoked: {exc}")
        typer.echo(f"quarantined {name}: stopped, {revoked} token(s) revoked, files kept")

    @agent_app.command("release")
    def release_cmd(name: Name) -> None:
        """End a quarantine: the orchestrator gives the agent a fresh token and starts it."""
        ctx = load_ctx()
        ctx.agent(name)
        try:
            with gateway_client(ctx.home) as client:
                release(ctx.layout, client, name)
        except GatewayError as exc:
            fail(f"could not re-enable {name} at the gateway: {exc}")
        typer.echo(f"released {name}")

    @memory_app.command("show")
    def memory_show(name: Name) -> None:
        """Print MEMORY.md, the memory files and the snapshots."""
        ctx = load_ctx()
        try:
            view = mem.show(ctx.layout, name)
        except mem.MemoryOpError as exc:
            fail(str(exc))
        typer.echo(view.memory_md.rstrip("\n"))
        typer.echo("\n-- files --")
        for rel, size in view.files:
            typer.echo(f"{rel}  " + ("(symlink, not followed)" if size < 0 else f"{size} B"))
        typer.echo("-- snapshots --\n" + ("\n".join(view.snapshots) or "(none)"))

    @memory_app.command("snapshot")
    def memory_snapshot(
        name: Name, label: Annotated[str, typer.Option(help="Suffix for the id.")] = ""
    ) -> None:
        """Save a snapshot of the agent's memory."""
        ctx = load_ctx()
        try:
            typer.echo(mem.snapshot(ctx.layout, name, label))
        except mem.MemoryOpError as exc:
            fail(str(exc))

    @memory_app.command("rollback")
    def memory_rollback(
        name: Name,
        to: Annotated[str | None, typer.Option(help="Snapshot id; default the latest.")] = None,
        restart: Annotated[bool, typer.Option(help="Restart the agent so that it rereads memory.")] = True,
    ) -> None:
        """Restore a snapshot (the current memory is snapshotted first)."""
        ctx = load_ctx()
        try:
            restored = mem.rollback(ctx.layout, name, to)
        except mem.MemoryOpError as exc:
            fail(str(exc))
        if restart and supervised(ctx.layout):
            request_restart(ctx.layout, name)
        typer.echo(f"{name}: memory rolled back to {restored}")

    @memory_app.command("reset")
    def memory_reset(
        name: Name,
        restart: Annotated[bool, typer.Option(help="Restart the agent so that it rereads memory.")] = True,
    ) -> None:
        """Empty the memory down to the identity banner (snapshotted first)."""
        ctx = load_ctx()
        try:
            snap = mem.reset(ctx.layout, ctx.agent(name), ctx.info.swarm)
        except mem.MemoryOpError as exc:
            fail(str(exc))
        if restart and supervised(ctx.layout):
            request_restart(ctx.layout, name)
        typer.echo(f"{name}: memory reset (previous memory saved as snapshot {snap})")
