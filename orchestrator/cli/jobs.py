"""``kswarm jobs`` (depth per pool, running jobs with devices, recent results), ``kswarm job show ID``,
and the operator's ``kswarm job cancel|retry ID`` and ``kswarm job submit KERNEL``.

``jobs`` is the top-level command and ``app`` the ``job`` group (``main`` assembles them); the gateway is
found like every command's (``commands.connect``). Cancel and retry are the monitor's operator actions
(``/api/actions/jobs/...``, audited and announced in ``#ops`` like the UI's buttons); retry runs a
finished job's kernel again at the same sha as a new job (``--at-head``: at its PR's head, when the sha
is no longer reachable). Submit is ``POST /api/jobs`` as the token's
principal.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from gateway.client import BadInput, Conflict, GatewayClient, Missing
from gateway.client.jobs.models import JOB_ID_RE
from orchestrator.cli.commands import HomeOpt, JsonOpt, command, connect
from orchestrator.cli.output import console, print_json, safe, since

JOB_ID_RULE = "j and 12 to 24 lowercase hex digits, e.g. j19ae0c3b2f1a7c4d"
"""What the gateway accepts as a job id (``gateway.client.jobs.models.JOB_ID_RE``), in words."""


def _outcome(job: dict[str, Any]) -> str:
    state = job["state"]
    colour = {"succeeded": "green", "failed": "red", "error": "red", "timeout": "red"}.get(state, "yellow")
    text = f"[{colour}]{safe(state)}[/{colour}]"
    if job.get("verdict") and job["verdict"] not in ("pass",):
        text += f" ({safe(job['verdict'])})"
    return text


def checked_job(job_id: str) -> str:
    """A job id as the gateway spells them; anything else is bad input, not a 404 from no route."""
    if not JOB_ID_RE.match(job_id):
        raise BadInput(0, f"{job_id!r} is not a job id: a job id is {JOB_ID_RULE}")
    return job_id


def cancel_job(gateway: GatewayClient, job_id: str) -> dict[str, Any]:
    """Cancel ``job_id`` (the audited operator action) and say what is true now: a queued job is
    cancelled at once; a running one is cancelled and its worker stops it (the job reads ``running``
    until it has). A job already cancelled, also one whose worker is still stopping it, is a
    ``Conflict`` that says so; cancelling it again would announce a second cancellation."""
    job = gateway.get(f"/api/jobs/{job_id}")
    if job.get("cancel_requested") and job["state"] == "running":
        raise Conflict(0, f"job {job_id} is already cancelled: its worker is stopping it")
    result: dict[str, Any] = gateway.request("POST", f"/api/actions/jobs/{job_id}/cancel")
    state = (result.get("data") or {}).get("state")
    if state == "running":
        result["message"] = (
            f"cancelled job {job_id} ({job['task']}, {job['pool']}): it was running; its worker stops it "
            "and records it as cancelled"
        )
    elif state == "cancelled":
        result["message"] = f"cancelled job {job_id} ({job['task']}, {job['pool']}) before it started"
    return result


def _shape_note(trial: dict[str, Any]) -> str:
    if trial.get("fresh"):
        return " (fresh: drawn from the task's domain)"
    return " (device shape)" if trial.get("device_shape") else ""


def reproduction(job: dict[str, Any]) -> str | None:
    """The command that reruns a job's verification exactly (its seed base replays its seeds and its
    fresh shapes), from kswarm's root with the kernel checked out at the job's sha; None before the
    harness answered."""
    result = job.get("result") or {}
    base = result.get("seed_base")
    if base is None:
        return None
    return (
        f"git -C CHECKOUT checkout {job['sha']} && python -m orchestrator.verify "
        f"--task gateway/tasks/catalogue/tasks/{job['task']} --candidate CHECKOUT/{job['kernel']} "
        f"--pool {result.get('pool') or job['pool']} --seed-base {base}"
    )


app = typer.Typer(help="One job: show its state, result and log.", no_args_is_help=True)


def jobs(
    pool: Annotated[str | None, typer.Option("--pool", help="Only this pool.")] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Job pools: depth per pool, running jobs with their devices, recent results."""
    with connect(home) as gateway:
        every = gateway.get("/api/jobs/pools")
    pools = [p for p in every if pool is None or p["pool"] == pool]
    if pool is not None and not pools:
        raise Missing(0, f"no pool {pool!r} (pools: {', '.join(p['pool'] for p in every) or 'none'})")
    if as_json:
        print_json(pools)
        return
    depth = Table("pool", "device", "executor", "queued", "running", "dead letters", "waiting by agent")
    for p in pools:
        cfg = p["config"]
        waiting = ", ".join(f"{safe(a)}:{n}" for a, n in sorted(p["queued_by_agent"].items())) or "-"
        depth.add_row(
            safe(p["pool"]),
            safe(cfg["device"]),
            safe(cfg["executor"]["kind"]),
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
                *(safe(j[k]) for k in ("id", "pool", "submitter", "task")),
                safe(j.get("node") or "-"),
                safe(",".join(j.get("allocated") or []) or "-"),
                str(j["attempts"]),
                since(j.get("started")),
            )
        for j in p["recent"]:
            recent.add_row(
                *(safe(j[k]) for k in ("id", "pool", "submitter", "task")),
                safe(j["sha"][:10]),
                _outcome(j),
                safe((j.get("error") or "")[:60]),
                since(j.get("finished")),
            )
    console.print("[bold]running[/bold]" if running.row_count else "no job running")
    if running.row_count:
        console.print(running)
    if recent.row_count:
        console.print("[bold]recent results[/bold]")
        console.print(recent)


@command(app, "cancel")
def cancel(
    job_id: Annotated[str, typer.Argument(help="Job id.")], home: HomeOpt = None, as_json: JsonOpt = False
) -> None:
    """Cancel a queued or running job (operators; audited)."""
    with connect(home) as gateway:
        result = cancel_job(gateway, checked_job(job_id))
    print_json(result) if as_json else console.print(safe(result["message"]), highlight=False)


@command(app, "retry")
def retry(
    job_id: Annotated[str, typer.Argument(help="Job id.")],
    at_head: Annotated[
        bool,
        typer.Option(
            "--at-head",
            help="At the current head of the job's PR (or branch) instead: for a job whose commit a "
            "force-push made unreachable.",
        ),
    ] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a finished job's kernel again at the same commit, as a new job (operators; audited). When
    that commit is no longer reachable the gateway refuses, says why and names the head --at-head
    runs at (exit 1)."""
    action = "resubmit" if at_head else "requeue"
    with connect(home) as gateway:
        result = gateway.request("POST", f"/api/actions/jobs/{checked_job(job_id)}/{action}")
    print_json(result) if as_json else console.print(safe(result["message"]), highlight=False)


@command(app, "submit")
def submit(
    kernel: Annotated[str, typer.Argument(help="kernels/<task>/<file>.py in the repo.")],
    ref: Annotated[str, typer.Option("--ref", help="Branch, tag or sha.")] = "main",
    repo: Annotated[
        str | None, typer.Option("--repo", "-r", help="org/name (default repo if unset).")
    ] = None,
    pool: Annotated[str, typer.Option("--pool", help="Pool to run in.")] = "cpu",
    kind: Annotated[str, typer.Option("--kind", help="verify or bench.")] = "verify",
    devices: Annotated[int | None, typer.Option("--devices", help="Devices (default: the pool's).")] = None,
    timeout_s: Annotated[int | None, typer.Option("--timeout", help="Seconds (default: the pool's).")] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit a verification (or bench) job of KERNEL at REF."""
    if kind not in ("verify", "bench"):
        raise BadInput(0, f"--kind is verify or bench, not {kind!r}")
    body: dict[str, Any] = {"kernel": kernel, "ref": ref, "repo": repo, "pool": pool, "kind": kind}
    body |= {k: v for k, v in (("devices", devices), ("timeout_s", timeout_s)) if v is not None}
    with connect(home) as gateway:
        job = gateway.request("POST", "/api/jobs", json=body)
    if as_json:
        print_json(job)
        return
    console.print(
        f"submitted {safe(job['id'])}: {safe(job['kernel'])} at {safe(job['sha'][:10])} "
        f"on {safe(job['pool'])} ({safe(job['state'])})"
    )


@command(app, "show")
def show(
    job_id: Annotated[str, typer.Argument(help="Job id.")],
    log: Annotated[bool, typer.Option("--log", help="Also print the end of its output.")] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """One job: identity, state, verdict, flags, per-trial errors."""
    with connect(home) as gateway:
        job = gateway.get(f"/api/jobs/{checked_job(job_id)}")
        tail = gateway.get(f"/api/jobs/{job_id}/logs", tail=4000) if log else None
    command = reproduction(job)
    if as_json:
        extra = {"reproduce": command} if command else {}
        print_json({**job, **extra} if tail is None else {**job, **extra, "log_tail": tail})
        return
    console.print(
        f"[bold]{safe(job['id'])}[/bold] {safe(job['kind'])} of {safe(job['task'])} "
        f"({safe(job['kernel'])}) {safe(job['repo'])}@{safe(job['sha'][:12])} "
        f"by @{safe(job['submitter'])}",
        highlight=False,
    )
    console.print(
        f"pool {safe(job['pool'])}, {job['devices']} device(s), node {safe(job.get('node') or '-')} "
        f"{safe('[' + (','.join(job.get('allocated') or []) or '-') + ']')}, "
        f"attempts {job['attempts']}/{job['max_attempts']}",
        highlight=False,
    )
    error = f" - {safe(job['error'])}" if job.get("error") else ""
    console.print(f"state: {_outcome(job)}{error}", highlight=False)
    result = job.get("result") or {}
    level = job.get("evidence") or result.get("evidence")  # the gateway's, capped by the pool
    if level:
        console.print(f"evidence: {safe(level)}")
    if result.get("flags"):
        console.print("flags: " + ", ".join(safe(f) for f in result["flags"]))
    trials = result.get("trials") or []
    if trials:
        table = Table("trial", "shape", "dtype", "seed", "ok", "max abs err", "flags")
        for t in trials:
            table.add_row(
                safe(t["index"]),
                safe(json.dumps(t.get("shape")) + _shape_note(t)),
                safe(t.get("dtype")),
                safe(t.get("seed")),
                "yes" if t.get("ok") else "[red]no[/red]",
                safe(t.get("max_abs_err")),
                safe(",".join(t.get("flags") or [])),
            )
        console.print(table)
    if command:
        where = f"CHECKOUT: a clone of {job['repo']}; a task of the dataset repo: its tasks/{job['task']}"
        console.print(f"reproduce ({safe(where)}): {safe(command)}", highlight=False, soft_wrap=True)
    if tail is not None:
        console.print(safe(tail, markup=False), markup=False, highlight=False)
