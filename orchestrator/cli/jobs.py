"""``kswarm jobs`` (depth per pool, running jobs with devices, recent results) and ``kswarm job show ID``.

Registered on the main CLI with ``orchestrator.cli.jobs.register(app)``. The gateway is found with
``gateway.client.home.connection()``: ``KSWARM_URL``/``KSWARM_TOKEN``, else ``$KSWARM_HOME/gateway.json``
and ``operator.token``.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any, NoReturn

import httpx
import typer
from rich.console import Console
from rich.table import Table

from gateway.client.home import ConnectError, connection

JsonOpt = Annotated[bool, typer.Option("--json", help="Print the raw JSON answer.")]


def _fail(message: str) -> NoReturn:
    Console(stderr=True).print(f"[red]error:[/red] {message}")
    raise typer.Exit(1)


def _get(path: str, **params: Any) -> Any:
    try:
        conn = connection()
    except ConnectError as exc:
        _fail(str(exc))
    try:
        reply = httpx.get(
            conn.url + path, params=params, headers={"Authorization": f"Bearer {conn.token}"}, timeout=60
        )
    except httpx.TransportError as exc:
        _fail(f"cannot reach the gateway at {conn.url}: {exc}")
    if reply.status_code >= 400:
        try:
            detail = reply.json().get("detail", reply.text)
        except ValueError:
            detail = reply.text
        _fail(f"{reply.status_code} {detail}")
    return reply.json() if "json" in reply.headers.get("content-type", "") else reply.text


def _ago(ts: float | None) -> str:
    if not ts:
        return "-"
    seconds = max(0, int(time.time() - ts))
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m"


def _outcome(job: dict[str, Any]) -> str:
    state = job["state"]
    colour = {"succeeded": "green", "failed": "red", "error": "red", "timeout": "red"}.get(state, "yellow")
    text = f"[{colour}]{state}[/{colour}]"
    if job.get("verdict") and job["verdict"] not in ("pass",):
        text += f" ({job['verdict']})"
    return text


def register(app: typer.Typer) -> None:
    job_app = typer.Typer(help="One job: show its state, result and log.", no_args_is_help=True)
    app.add_typer(job_app, name="job")

    @app.command("jobs")
    def jobs(
        pool: Annotated[str | None, typer.Option("--pool", help="Only this pool.")] = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Job pools: depth per pool, running jobs with their devices, recent results."""
        pools = [p for p in _get("/api/jobs/pools") if pool is None or p["pool"] == pool]
        if as_json:
            print(json.dumps(pools, indent=2))
            return
        console = Console()
        depth = Table("pool", "device", "executor", "queued", "running", "dead letters", "waiting by agent")
        for p in pools:
            cfg = p["config"]
            waiting = ", ".join(f"{a}:{n}" for a, n in sorted(p["queued_by_agent"].items())) or "-"
            depth.add_row(
                p["pool"],
                cfg["device"],
                cfg["executor"],
                str(p["queued"]),
                str(p["running"]),
                str(p["dead_letters"]),
                waiting,
            )
        console.print(depth)
        running = Table("job", "pool", "submitter", "task", "node", "devices", "attempt", "for")
        recent = Table("job", "pool", "submitter", "task", "sha", "result", "why", "ago")
        for p in pools:
            for j in p["running_jobs"]:
                running.add_row(
                    j["id"],
                    j["pool"],
                    j["submitter"],
                    j["task"],
                    j.get("node") or "-",
                    ",".join(j.get("allocated") or []) or "-",
                    str(j["attempts"]),
                    _ago(j.get("started")),
                )
            for j in p["recent"]:
                recent.add_row(
                    j["id"],
                    j["pool"],
                    j["submitter"],
                    j["task"],
                    j["sha"][:10],
                    _outcome(j),
                    (j.get("error") or "")[:60],
                    _ago(j.get("finished")),
                )
        console.print("[bold]running[/bold]" if running.row_count else "no job running")
        if running.row_count:
            console.print(running)
        if recent.row_count:
            console.print("[bold]recent results[/bold]")
            console.print(recent)

    @job_app.command("show")
    def show(
        job_id: Annotated[str, typer.Argument(help="Job id.")],
        log: Annotated[bool, typer.Option("--log", help="Also print the end of its output.")] = False,
        as_json: JsonOpt = False,
    ) -> None:
        """One job: identity, state, verdict, flags, per-trial errors."""
        job = _get(f"/api/jobs/{job_id}")
        if as_json:
            print(json.dumps(job, indent=2))
            return
        console = Console()
        console.print(
            f"[bold]{job['id']}[/bold] {job['kind']} of {job['task']} ({job['kernel']}) "
            f"{job['repo']}@{job['sha'][:12]} by @{job['submitter']}"
        )
        console.print(
            f"pool {job['pool']}, {job['devices']} device(s), node {job.get('node') or '-'} "
            f"[{','.join(job.get('allocated') or []) or '-'}], "
            f"attempts {job['attempts']}/{job['max_attempts']}"
        )
        console.print(f"state: {_outcome(job)}" + (f" - {job['error']}" if job.get("error") else ""))
        result = job.get("result") or {}
        if result.get("flags"):
            console.print("flags: " + ", ".join(result["flags"]))
        trials = result.get("trials") or []
        if trials:
            table = Table("trial", "shape", "dtype", "seed", "ok", "max abs err", "flags")
            for t in trials:
                table.add_row(
                    str(t["index"]),
                    json.dumps(t["shape"]),
                    t["dtype"],
                    str(t["seed"]),
                    "yes" if t["ok"] else "[red]no[/red]",
                    f"{t['max_abs_err']}",
                    ",".join(t["flags"]),
                )
            console.print(table)
        if log:
            console.print(_get(f"/api/jobs/{job_id}/logs", tail=4000), markup=False, highlight=False)
