"""The swarm as a whole: ``kswarm init|validate|schema|up|down|ps``, one module-level function each
that ``main`` names (``logs``: ``orchestrator/cli/logs.py``).

They work from any terminal: the swarm is found through ``<home>/swarm/swarm.json`` (written by the
supervisor), the gateway through ``commands.connect`` (``--home``/``KSWARM_HOME``, ``KSWARM_URL``/
``KSWARM_TOKEN``). ``load_ctx`` is also what the agent and worker commands start from.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn

import typer

from gateway.client import BadInput, GatewayInfo, Missing, NoGateway, kswarm_home
from gateway.client.home import ensure_home
from orchestrator.cli import complete
from orchestrator.cli.agent_table import liveness_rows, print_agent_table
from orchestrator.cli.commands import HomeOpt, JsonOpt, connect
from orchestrator.cli.lifecycle import (
    UpLock,
    already_up,
    down_lines,
    health_line,
    print_banner,
    stop_launcher,
    up_log,
    up_result,
)
from orchestrator.cli.lifecycle import detach as run_detached
from orchestrator.cli.output import fail, fail_each, print_json, warn
from orchestrator.cli.ui import banner_ui_lines, echo_lines
from orchestrator.runtime.base import AgentRuntime
from orchestrator.spec import AgentSpec, RuntimeOptions, SpecError, SwarmSpec, load_spec, template_text
from orchestrator.supervisor.operations import SwarmInfo, agent_rows, make_runtime
from orchestrator.swarm_dir.provision import SwarmLayout

Name = Annotated[str, typer.Argument(help="Agent name.", autocompletion=complete.agent_names)]
Backend = Literal["process", "docker"]
SpecFile = Annotated[Path, typer.Option("-f", "--file", help="The swarm spec (swarm.yaml).")]


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
                role="developer",
                model="",
                runtime=RuntimeOptions(),
                resources=self.spec.defaults.resources,
            )
        raise Missing(0, f"no agent {name!r} in swarm {self.info.swarm}")


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


def gateway_view(ctx: Ctx) -> tuple[list[dict[str, Any]], list[Any]]:
    """The swarm's agents as the gateway computed them (their liveness, tokens and cost) and the job
    pools. With no gateway at all ``ps`` still shows the swarm (the records, state ``unknown``) and says
    so; any other failure (a refused token) is the command's."""
    names = set(ctx.info.agents) | set(ctx.runtime.list())
    try:
        with connect(ctx.home) as gateway:
            rows = liveness_rows(gateway, names)
            pools = gateway.get("/api/jobs/pools")
            url = gateway.target.url
    except NoGateway as exc:
        warn(f"{exc.line()}; the orchestrator's records, no liveness, no usage")
        return agent_rows(ctx.layout, ctx.runtime), []
    degraded = health_line(url) if url else None
    if degraded:
        warn(f"the gateway is degraded: {degraded}")
    return rows, pools


def running_agents(ctx: Ctx | None) -> list[str]:
    """The swarm's agents that run now (none without a swarm)."""
    if ctx is None:
        return []
    return sorted(name for name, status in ctx.runtime.list().items() if status.running)


def invalid(path: Path, problems: list[str], as_json: bool) -> NoReturn:
    """``validate``'s end for a spec that will not run: each problem (with --json, as one object), exit 2."""
    if as_json:
        print_json({"file": str(path), "valid": False, "errors": problems})
        raise typer.Exit(2)
    fail_each(problems, 2)


def init(
    path: SpecFile = Path("swarm.yaml"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented swarm.yaml (agents, the dataset repo, the cpu pool, a review policy)."""
    if path.exists() and not force:
        fail(f"{path} exists (use --force to overwrite)")
    path.write_text(template_text())
    typer.echo(f"wrote {path}; check it with: kswarm validate -f {path}; start it with: kswarm up -f {path}")


def validate(path: SpecFile = Path("swarm.yaml"), as_json: JsonOpt = False) -> None:
    """Check a swarm.yaml without starting anything: every problem with its file:line, exit 2
    (with --json: {"valid": false, "errors": [...]} on stdout, exit 2 too)."""
    try:
        spec = load_spec(path)
    except (SpecError, OSError) as exc:
        problems = exc.problems if isinstance(exc, SpecError) else [f"cannot read {path}: {exc.strerror}"]
        invalid(path, problems, as_json)
    from orchestrator.runtime.runnable import runtime_problems

    if problems := runtime_problems(spec):  # a runtime that cannot start here would crash-loop
        invalid(path, [f"{path}: {problem}" for problem in problems], as_json)
    agents = spec.expand()
    summary = {
        "file": str(path),
        "valid": True,
        "swarm": spec.swarm,
        "backend": spec.backend,
        "agents": [
            {"name": a.name, "role": a.role, "model": a.model, "runtime": a.runtime.kind} for a in agents
        ],
        "pools": [
            {"name": p.name, "executor": p.executor.kind, "device": p.device, "workers": p.workers}
            for p in spec.pools
        ],
        "repos": [
            {"name": f"{spec.swarm}/{r.name}", "kind": r.kind, "description": r.description}
            for r in spec.repos
        ],
    }
    if as_json:
        print_json(summary)
        return
    roles = ", ".join(f"{a.name} ({a.role})" for a in agents)
    typer.echo(f"{path}: ok -- swarm {spec.swarm} on {spec.backend}")
    typer.echo(f"  agents  {len(agents)}: {roles}")
    for p in spec.pools:
        typer.echo(f"  pool    {p.name}: {p.executor.kind}, {p.device}, {p.workers} worker(s)")
    for r in spec.repos:
        typer.echo(
            f"  repo    {spec.swarm}/{r.name} ({r.kind})" + (f": {r.description}" if r.description else "")
        )


def schema() -> None:
    """Print the JSON Schema of swarm.yaml (for editors: yaml-language-server, VS Code)."""
    from orchestrator.spec import spec_schema

    print_json(spec_schema())


def up(
    home: HomeOpt = None,
    port: Annotated[int, typer.Option("--port", help="Gateway TCP port on 127.0.0.1.")] = 8765,
    file: Annotated[Path | None, typer.Option("-f", "--file", help="Swarm spec (swarm.yaml) to run.")] = None,
    backend: Annotated[
        Backend | None,
        typer.Option("--backend", help="Agent runtime: process or docker (default: the spec's)."),
    ] = None,
    llm_url: Annotated[
        str | None,
        typer.Option(
            "--llm-url",
            envvar="KSWARM_LLM_URL",
            help="Anthropic-compatible model server for the gateway's LLM proxy (vLLM, LiteLLM, "
            "Ollama, llama.cpp); the key stays in the gateway.",
        ),
    ] = None,
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Run in the background; `kswarm down` stops it.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="With -d: print what is up (pid, URLs, log) as JSON.")
    ] = False,
) -> None:
    """Start Redis (embedded unless REDIS_URL is set), the gateway and, with -f, the swarm's agents
    and job workers. Ctrl-C (or `kswarm down`) stops agents, workers, gateway and Redis, in order."""
    import uvloop

    from orchestrator.local.launcher import Launcher, LaunchError

    if as_json and not detach:
        raise BadInput(0, "--json needs -d: a foreground `kswarm up` prints as it runs")
    home_dir = ensure_home(kswarm_home(home))
    lock = UpLock(home_dir)
    refused = already_up(home_dir)
    if refused is None and not detach and not lock.acquire():  # started beside us just now
        refused = already_up(home_dir) or f"kswarm up is already starting for {home_dir}"
    if refused is not None:
        fail(refused)
    if port_in_use("127.0.0.1", port):
        fail(f"port {port} on 127.0.0.1 is in use; pick another with --port")
    try:
        launcher = Launcher(
            home_dir, port=port, spec_path=file, backend=backend, llm_url=llm_url, freeze_heap=True
        )
    except LaunchError as exc:
        if file is not None and ":" in str(exc) and str(file) in str(exc):
            fail_each(str(exc).splitlines(), 2)  # the spec's problems, one line each
        fail(str(exc))
    if detach:
        argv = ["--home", str(home_dir), "--port", str(port)]
        argv += ["-f", str(file.resolve())] if file is not None else []
        argv += ["--backend", backend] if backend else []
        argv += ["--llm-url", llm_url] if llm_url else []
        try:
            pid, info = run_detached(home_dir, argv)
        except RuntimeError as exc:
            fail(str(exc))
        token = (home_dir / "operator.token").read_text().strip()
        if as_json:
            print_json(up_result(home_dir, pid, info, token, launcher.warnings))
            return
        print_banner(info, token, launcher.warnings, launcher.spec, health_line(info.url))
        echo_lines(asyncio.run(banner_ui_lines(info.url, token)))
        typer.echo(
            f"running in the background (pid {pid}, log {up_log(home_dir)}); stop it with: "
            f"kswarm down --home {home_dir}"
        )
        return

    async def ready(info: GatewayInfo) -> None:
        token = launcher.operator_token
        print_banner(info, token, launcher.warnings, launcher.spec, launcher.degraded)
        echo_lines(await banner_ui_lines(info.url, token))  # links outside the panel: never wrapped

    try:
        uvloop.run(launcher.run(on_ready=ready))
    except LaunchError as exc:
        fail(str(exc))


def down(
    purge: Annotated[
        bool,
        typer.Option("--purge", help="Also delete agents' volumes, files, snapshots, workers' records."),
    ] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Stop the swarm's `kswarm up` (agents, workers, gateway, Redis) and whatever it left running;
    say what was running and is stopped now (nothing, on a second `down`)."""
    from orchestrator.local.embedded_redis import EmbeddedRedis
    from orchestrator.supervisor.operations import stop_supervisor, stop_swarm

    home_dir = kswarm_home(home)
    layout = SwarmLayout(home_dir)
    info = SwarmInfo.load(layout)
    ever_up = (home_dir / "operator.token").exists()  # written by the first `up` of this home
    if info is None and GatewayInfo.read(home_dir) is None and not ever_up:
        fail(f"no swarm in {home_dir} (start one with: kswarm up -f swarm.yaml --home {home_dir})")
    ctx = load_ctx(home_dir) if info is not None else None
    # Counted before each step stops them: the lines say what this command stopped, not what exists.
    running = running_agents(ctx)
    try:
        launcher = stop_launcher(home_dir)
    except TimeoutError as exc:
        fail(f"{exc}; agents may be left running")
    left: list[str] = []
    names: list[str] = []
    if ctx is not None:
        left = running_agents(ctx)  # a killed `up`'s, or a supervisor's started beside `up`
        if not stop_supervisor(ctx.layout, ctx.info.supervisor_pid):
            fail("the orchestrator did not stop within 30s; agents left running")
        left = sorted(set(left) | set(running_agents(ctx)))
        names = stop_swarm(ctx.layout, ctx.runtime, purge)
    if (home_dir / "redis").is_dir():
        EmbeddedRedis(home_dir).release()  # stops a Redis a killed `up` left, if nobody else uses it
    result = {
        "home": str(home_dir),
        "up_pid": launcher,  # the `kswarm up` stopped, if one ran
        "agents_stopped_by_up": [n for n in running if n not in left] if launcher is not None else [],
        "agents_stopped": left,  # the ones running without (or after) an `up`
        "purged": names if purge else [],
    }
    if as_json:
        print_json(result)
        return
    for line in down_lines(result):
        typer.echo(line)


def ps(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Agents with backend, state (the gateway's liveness: running, idle, starting, stalled,
    crash-looping, quarantined, stopped), uptime, restarts, last heartbeat, tokens, cost and what
    they do, as `kswarm agent list`; then the job workers (kswarm workers); a degraded gateway is
    said on stderr."""
    from orchestrator.cli.worker import print_workers
    from orchestrator.supervisor.pool_workers import worker_rows

    ctx = load_ctx(home)
    rows, pools = gateway_view(ctx)
    if as_json:
        print_json(rows, indent=1)
        return
    print_agent_table(rows)
    workers = worker_rows(ctx.layout, pools)
    if workers:
        typer.echo("")
        print_workers(workers)
