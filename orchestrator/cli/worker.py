"""``kswarm workers`` (the swarm's job workers and what the gateway sees of them) and ``kswarm worker
token POOL`` (a token for a worker started elsewhere: another machine, a Slurm login node)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gateway.client import kswarm_home
from orchestrator.cli import complete
from orchestrator.cli.commands import HomeOpt, JsonOpt, command, connect
from orchestrator.cli.output import age, print_json, safe

Pool = Annotated[str, typer.Argument(help="Pool name.", autocompletion=complete.pool_names)]


def print_workers(rows: list[dict[str, Any]]) -> None:
    typer.echo(
        f"{'WORKER':<20} {'POOL':<12} {'NODE':<10} {'STATE':<14} {'UPTIME':>7} {'RESTARTS':>8} "
        f"{'HEARTBEAT':>10}  JOBS"
    )
    for r in rows:
        beat = "-" if r["heartbeat_s"] is None else age(r["heartbeat_s"]) + " ago"
        jobs = ",".join(r["jobs"]) or ("-" if r["last_error"] == "" else f"({r['last_error'][:60]})")
        jobs = safe(jobs, markup=False)  # a worker's own words
        typer.echo(
            f"{r['worker']:<20} {r['pool']:<12} {r['node']:<10} {r['state']:<14} {age(r['uptime_s']):>7} "
            f"{r['restarts']:>8} {beat:>10}  {jobs}"
        )


def pool_lines(pools: list[dict[str, Any]]) -> list[str]:
    return [
        f"pool {p['pool']}: no worker -- its jobs wait (kswarm worker token {p['pool']})"
        for p in pools
        if p.get("no_worker")
    ]


def workers(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """The swarm's job workers: pool, node, state, heartbeat (node lease), the jobs they run; and
    every pool that has no live worker."""
    from orchestrator.cli.output import warn
    from orchestrator.supervisor.pool_workers import worker_rows
    from orchestrator.swarm_dir.provision import SwarmLayout

    with connect(home) as gateway:
        pools = gateway.get("/api/jobs/pools")
    rows = worker_rows(SwarmLayout(kswarm_home(home)), pools)
    if as_json:
        keys = ("pool", "workers", "workers_expected", "no_worker")
        view = [{k: p.get(k) for k in keys} for p in pools]
        print_json({"workers": rows, "pools": view}, indent=1)
        return
    if rows:
        print_workers(rows)
    else:
        typer.echo("no job workers run in this swarm (kswarm up -f with workers: N starts them)")
    for line in pool_lines(pools):
        warn(line)


app = typer.Typer(help="Job workers started elsewhere: a token for one.", no_args_is_help=True)


@command(app, "token")
def token(
    pool: Pool,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write the token to this file (mode 600).")
    ] = None,
) -> None:
    """A new token for POOL's worker principal (operators; it serves POOL only): on stdout, or in
    --out; the command line that starts a worker with it goes to stderr."""
    from gateway.client.home import write_secret

    with connect(home) as gateway:
        granted = gateway.request("POST", f"/api/jobs/pools/{pool}/workers")
        url = gateway.target.url or "URL"
    token_file = str(out) if out is not None else f"{pool}.token"
    command_line = (
        f"python -m orchestrator.worker --pool {granted['pool']} --gateway {url} --token-file {token_file}"
    )
    if out is not None:
        write_secret(out, granted["token"])
    if as_json:
        print_json({**granted, "command": command_line} | ({"token": None} if out is not None else {}))
        return
    if out is None:
        print(granted["token"])
    print(
        f"{granted['principal']} serves pool {granted['pool']} only. Keep the token in a file and run:\n"
        f"  {command_line}",
        file=sys.stderr,
    )
