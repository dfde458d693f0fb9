"""``kswarm demo``: the command is ``demo`` (``main`` names it).

A fresh home (default ``~/.kswarm-demo``; a previous demo's is wiped, anything else is refused), the
demo swarm (or ``--spec``), then ``DemoLauncher`` runs the flow with live progress and stops everything
it started -- or, with ``--keep``, leaves it running until Ctrl-C / ``kswarm down``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
import socket
from pathlib import Path
from typing import Annotated, Literal

import typer
import uvloop
from rich.console import Console

from gateway.client import GatewayCallError
from orchestrator.cli.output import PipeAwareConsole
from orchestrator.demo.spec import (
    DEFAULT_MODEL_ID,
    DEFAULT_TASKS,
    DemoSpecError,
    check_tasks,
    demo_spec,
    load_demo_spec,
    roster_of,
    write_spec,
)

DEFAULT_HOME = Path("~/.kswarm-demo")
DEFAULT_PORT = 8765
KEY_VARS = ("KSWARM_LLM_API_KEY", "ANTHROPIC_API_KEY", "KSWARM_LLM_UPSTREAM_URL", "KSWARM_LLM_URL")
Model = Literal["scripted", "anthropic"]
Backend = Literal["process", "docker"]


class HomeError(RuntimeError):
    """The home cannot be used for a demo; the message says why."""


def preflight() -> None:
    """What the demo needs besides the gateway: git, the harness (torch, triton, numpy), pyarrow."""
    missing = [m for m in ("torch", "triton", "numpy", "pyarrow") if importlib.util.find_spec(m) is None]
    if missing:
        raise DemoSpecError(
            f"the demo verifies kernels and builds a dataset, which needs {', '.join(missing)}: "
            "install the verify extras (.venv/bin/pip install -e '.[verify]') and pyarrow"
        )
    if shutil.which("git") is None:
        raise DemoSpecError("the demo needs git (apt-get install git)")


def free_port(preferred: int) -> int:
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", preferred)) != 0:
            return preferred
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fresh_home(home: Path) -> None:
    """Wipe a previous demo's home (stopping what a killed demo left behind); refuse any other."""
    from gateway.client.home import GatewayInfo
    from orchestrator.local.embedded_redis import EmbeddedRedis
    from orchestrator.spec import SwarmSpec
    from orchestrator.supervisor.main import SwarmInfo, make_runtime, stop_swarm
    from orchestrator.swarm_dir.provision import SwarmLayout

    info = GatewayInfo.read(home)
    if info is not None and info.alive():
        raise HomeError(
            f"a kswarm runs on {home} (pid {info.pid}): stop it first with `kswarm down --home {home}`"
        )
    if home.exists() and any(home.iterdir()) and not (home / "demo").is_dir():
        raise HomeError(f"{home} holds a kswarm that is not a demo's; pick another --home")
    if not home.exists():
        return
    layout = SwarmLayout(home)
    swarm = SwarmInfo.load(layout)
    if swarm is not None and swarm.spec:
        with contextlib.suppress(Exception):  # best effort: the agents of a demo that was killed
            spec = SwarmSpec.model_validate(swarm.spec)
            stop_swarm(layout, make_runtime(swarm.backend, layout, spec), purge=True)
    EmbeddedRedis(home).release()  # a Redis left by a killed demo stops when no live user remains
    shutil.rmtree(home)


def run_demo(
    *,
    keep: bool,
    model: str,
    backend: str,
    agents: int,
    home: Path,
    port: int | None,
    spec_file: Path | None,
    tasks: tuple[str, ...],
    timeout_s: float | None,
    model_id: str,
    console: Console,
    llm_url: str | None = None,
) -> int:
    from gateway.client.home import ensure_home
    from orchestrator.cli.ui import banner_ui_lines
    from orchestrator.demo.flow import DemoError, DemoOptions, drive
    from orchestrator.demo.launcher import DemoLauncher, Running
    from orchestrator.demo.progress import ProgressView
    from orchestrator.demo.report import print_cast, print_summary
    from orchestrator.local.launcher import LaunchError

    if model not in ("scripted", "anthropic"):
        raise DemoSpecError("--model is scripted or anthropic")
    if backend not in ("process", "docker"):
        raise DemoSpecError("--backend is process or docker")
    if llm_url:
        # The demo's gateway reads its upstream from here (orchestrator.local.launcher.llm_settings).
        os.environ["KSWARM_LLM_URL"] = llm_url
    if model == "anthropic" and not any(os.environ.get(v) for v in KEY_VARS):
        raise DemoSpecError(
            "--model anthropic needs a model: export ANTHROPIC_API_KEY (or KSWARM_LLM_API_KEY) for "
            "Anthropic, or --llm-url URL for an Anthropic-compatible server (vLLM, LiteLLM, Ollama, "
            "llama.cpp); the key stays in the gateway, agents never see it"
        )
    check_tasks(list(tasks))
    preflight()
    spec = load_demo_spec(spec_file) if spec_file else demo_spec(agents, model, backend, model_id)
    roster = roster_of(spec)
    fresh_home(home)
    ensure_home(home)
    write_spec(spec, home / "demo" / "swarm.yaml")
    # The console is for the story; the components' logs (gateway, gate, supervisor) go to a file.
    (home / "demo" / "logs").mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        filename=home / "demo" / "logs" / "demo.log",
        level=logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        force=True,
    )
    chosen = port if port is not None else free_port(DEFAULT_PORT)
    options = DemoOptions(
        tasks=tasks, timeout_s=timeout_s or (480.0 if model == "scripted" else 1800.0), keep=keep
    )
    shown = (
        "scripted (a demo policy, not a model)" if spec.defaults.model == "scripted" else spec.defaults.model
    )

    async def driver(running: Running) -> int:
        print_cast(console, running, tasks, shown)
        title = f"kswarm demo · {running.url}/ui"
        try:
            with ProgressView(console, title, list(tasks)) as view:
                summary = await drive(running, options, view)
        except (DemoError, GatewayCallError) as exc:
            console.print(f"[red]error:[/red] {exc}")
            return 1
        ui = await banner_ui_lines(running.url, running.operator_token) if keep else None
        print_summary(console, summary, running, keep, ui)
        if not keep:
            console.print("stopping everything the demo started ...")
        return 0 if summary["ok"] else 1

    launcher = DemoLauncher(home, chosen, spec, roster, backend, keep=keep)
    try:
        code = uvloop.run(launcher.run(driver))
    except LaunchError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 1
    console.print("stopped." if code != 130 else "interrupted; everything the demo started is stopped.")
    return code


def demo(
    keep: Annotated[
        bool, typer.Option("--keep", help="Leave everything running afterwards (Ctrl-C stops).")
    ] = False,
    model: Annotated[
        Model, typer.Option("--model", help="scripted (offline demo policy) or anthropic.")
    ] = "scripted",
    backend: Annotated[
        Backend, typer.Option("--backend", help="Agent runtime: process or docker.")
    ] = "process",
    agents: Annotated[
        int, typer.Option("--agents", help="How many agents (at least 4; from 5 on, one is a red team).")
    ] = 5,
    home: Annotated[
        Path, typer.Option("--home", help="The demo's data dir (wiped at start).")
    ] = DEFAULT_HOME,
    port: Annotated[
        int | None, typer.Option("--port", help="Gateway port (default 8765, else a free one).")
    ] = None,
    spec: Annotated[
        Path | None, typer.Option("--spec", help="A swarm.yaml with lead/developer/reviewer roles.")
    ] = None,
    tasks: Annotated[str, typer.Option("--tasks", help="Comma-separated catalogue tasks.")] = ",".join(
        DEFAULT_TASKS
    ),
    timeout: Annotated[float | None, typer.Option("--timeout", help="Seconds before giving up.")] = None,
    model_id: Annotated[
        str, typer.Option("--model-id", help="Model for --model anthropic.")
    ] = DEFAULT_MODEL_ID,
    llm_url: Annotated[
        str | None,
        typer.Option(
            "--llm-url",
            envvar="KSWARM_LLM_URL",
            help="Anthropic-compatible server for --model anthropic (vLLM, LiteLLM, Ollama, llama.cpp).",
        ),
    ] = None,
) -> None:
    """The whole swarm end to end: tasks, kernels, jobs, reviews, the gate, the dataset."""
    console = PipeAwareConsole()
    try:
        code = run_demo(
            keep=keep,
            model=model,
            backend=backend,
            agents=agents,
            home=home.expanduser().resolve(),
            port=port,
            spec_file=spec,
            tasks=tuple(t.strip() for t in tasks.split(",") if t.strip()),
            timeout_s=timeout,
            model_id=model_id,
            console=console,
            llm_url=llm_url,
        )
    except (DemoSpecError, HomeError) as exc:
        PipeAwareConsole(stderr=True).print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from exc
    raise typer.Exit(code)
