"""The swarm as a whole: ``kswarm init|up|down|ps|logs``; ``register`` adds them to the ``kswarm`` app.

They work from any terminal: the swarm is found through ``<home>/swarm/swarm.json`` (written by the
supervisor), the gateway through ``commands.connect`` (``--home``/``KSWARM_HOME``, ``KSWARM_URL``/
``KSWARM_TOKEN``). ``load_ctx`` is also what the agent commands (``orchestrator.cli.agent``) start from.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
import uvloop
from rich.panel import Panel

from gateway.client import GatewayInfo, NoGateway, kswarm_home
from gateway.client.home import ensure_home
from orchestrator.cli.commands import HomeOpt, JsonOpt, command, connect
from orchestrator.cli.output import age, console, fail, print_json, warn
from orchestrator.provision import SwarmLayout
from orchestrator.runtime.base import AgentRuntime
from orchestrator.spec import AgentSpec, RuntimeOptions, SwarmSpec, template_text
from orchestrator.supervisor import SwarmInfo, agent_rows, make_runtime, stop_supervisor, stop_swarm

Name = Annotated[str, typer.Argument(help="Agent name.")]


@dataclass
class Ctx:
    """What every swarm command needs: where the swarm lives, its spec and its backend."""

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


def load_ctx(home: Path | None) -> Ctx:
    home_dir = kswarm_home(home)
    layout = SwarmLayout(home_dir)
    info = SwarmInfo.load(layout)
    if info is None:
        fail(f"no swarm in {home_dir} (start one with: kswarm up -f swarm.yaml --home {home_dir})")
    try:
        spec = SwarmSpec.model_validate(info.spec or {})
    except ValueError:  # an older swarm.json: enough of a spec to find the agents
        spec = SwarmSpec(swarm=info.swarm, agents=[{"name": n} for n in info.agents] or [{"name": "x"}])
    return Ctx(home_dir, layout, info, spec, make_runtime(info.backend, layout, spec))


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((host, port)) == 0


def print_banner(info: GatewayInfo, token: str, warnings: list[str]) -> None:
    body = (
        f"gateway   [bold]{info.url}[/bold]\n"
        f"socket    {info.socket}\n"
        f"operator  {token}\n"
        f"          (also in {Path(info.socket).parent.parent / 'operator.token'}, mode 600)\n\n"
        "In another terminal:  kswarm agent add alice   ·   kswarm chat tail general -f"
    )
    console.print(Panel(body, title="kswarm is up", subtitle="Ctrl-C stops it", expand=False))
    for warning in warnings:
        warn(warning)


def gateway_view(home: Path) -> tuple[dict[str, float | None], dict[str, dict[str, Any]]]:
    """Heartbeats and LLM usage per agent from the gateway. With no gateway at all ``ps`` still shows
    the swarm (from the records) and says so; any other failure (a refused token) is the command's."""
    try:
        with connect(home) as gateway:
            beats = {a["name"]: a.get("last_heartbeat") for a in gateway.agents()}
            # Tokens and cost from the gateway's LLM proxy (all agents: the CLI is the operator).
            usage = gateway.get("/api/usage").get("agents", {})
    except NoGateway as exc:
        warn(f"{exc.line()}; heartbeats from the last record, no usage")
        return {}, {}
    return beats, usage


def register(app: typer.Typer) -> None:
    """Add the swarm's commands to ``kswarm`` (the agent commands are ``orchestrator/cli/agent.py``)."""

    @command(app, "init")
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

    @command(app, "up")
    def up(
        home: HomeOpt = None,
        port: Annotated[int, typer.Option("--port", help="Gateway TCP port on 127.0.0.1.")] = 8765,
        file: Annotated[
            Path | None, typer.Option("-f", "--file", help="Swarm spec (swarm.yaml) to run.")
        ] = None,
        backend: Annotated[
            str | None,
            typer.Option("--backend", help="Agent runtime: process or docker (default: the spec's)."),
        ] = None,
    ) -> None:
        """Start Redis (embedded unless REDIS_URL is set) and the gateway in the foreground."""
        from orchestrator.local.launcher import Launcher, LaunchError

        home_dir = ensure_home(kswarm_home(home))
        existing = GatewayInfo.read(home_dir)
        if existing is not None and existing.alive():
            fail(f"kswarm is already up for {home_dir} at {existing.url} (pid {existing.pid})")
        if port_in_use("127.0.0.1", port):
            fail(f"port {port} on 127.0.0.1 is in use; pick another with --port")
        try:
            launcher = Launcher(home_dir, port=port, spec_path=file, backend=backend)
            uvloop.run(
                launcher.run(
                    on_ready=lambda info: print_banner(info, launcher.operator_token, launcher.warnings)
                )
            )
        except LaunchError as exc:
            fail(str(exc))

    @command(app, "down")
    def down(
        purge: Annotated[
            bool, typer.Option(help="Also delete agents' volumes, files and snapshots.")
        ] = False,
        home: HomeOpt = None,
    ) -> None:
        """Stop the orchestrator and every agent of the swarm."""
        ctx = load_ctx(home)
        info = GatewayInfo.read(ctx.home)
        if not stop_supervisor(ctx.layout, ctx.info.supervisor_pid or (info.pid if info else None)):
            fail("the orchestrator did not stop within 30s; agents left running")
        names = stop_swarm(ctx.layout, ctx.runtime, purge)
        typer.echo(
            f"stopped {len(names)} agent(s)" + (" and purged their files and volumes" if purge else "")
        )

    @command(app, "ps")
    def ps(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
        """Agents with backend, state, uptime, restarts, last heartbeat, tokens and cost."""
        ctx = load_ctx(home)
        beats, usage = gateway_view(ctx.home)
        rows = agent_rows(ctx.layout, ctx.runtime, beats)
        for r in rows:
            spent = usage.get(r["agent"], {})
            r["tokens"] = spent.get("total_tokens", 0)
            r["cost_usd"] = spent.get("cost_usd", 0.0)
        if as_json:
            print_json(rows, indent=1)
            return
        header = (
            f"{'AGENT':<20} {'BACKEND':<8} {'STATE':<12} {'UPTIME':>8} {'RESTARTS':>8} {'HEARTBEAT':>10}"
            f" {'TOKENS':>9} {'COST':>8}"
        )
        typer.echo(header)
        for r in rows:
            beat = age(r["last_heartbeat_s"]) + (" ago" if r["last_heartbeat_s"] is not None else "")
            typer.echo(
                f"{r['agent']:<20} {r['backend']:<8} {r['state']:<12} {age(r['uptime_s']):>8} "
                f"{r['restarts']:>8} {beat:>10} {r['tokens']:>9} {'$' + format(r['cost_usd'], '.4f'):>8}"
            )

    @command(app, "logs")
    def logs(
        name: Name,
        follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
        tail: Annotated[int | None, typer.Option(help="Only the last N lines.")] = None,
        home: HomeOpt = None,
    ) -> None:
        """An agent's output."""
        ctx = load_ctx(home)
        ctx.agent(name)
        try:
            for line in ctx.runtime.logs(name, follow=follow, tail=tail):
                typer.echo(line, nl=not line.endswith("\n"))
        except KeyboardInterrupt:
            pass
