"""``kswarm prs`` and ``kswarm pr show|why N``: pull requests and the review gate's reasons.

Registered on the main CLI with ``prs.register(app)``. The gateway is found through
``KSWARM_URL`` + ``KSWARM_TOKEN``, else ``$KSWARM_HOME/gateway.json`` and ``$KSWARM_HOME/operator.token``
(``KSWARM_HOME`` defaults to ~/.kswarm).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated, Any, NoReturn

import httpx
import typer
from rich.console import Console
from rich.table import Table

console = Console()
err_console = Console(stderr=True)

RepoOpt = Annotated[str | None, typer.Option("--repo", "-r", help="org/name (needed when N is ambiguous).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the raw JSON answer.")]


def fail(message: str) -> NoReturn:
    err_console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(1)


def gateway() -> tuple[str, str]:
    """(url, token) of the gateway this CLI talks to."""
    home = Path(os.environ.get("KSWARM_HOME") or Path.home() / ".kswarm").expanduser()
    url = os.environ.get("KSWARM_URL")
    if not url:
        try:
            url = json.loads((home / "gateway.json").read_text())["url"]
        except (OSError, ValueError, KeyError):
            fail(f"no gateway: set KSWARM_URL or run `kswarm up` (reads {home}/gateway.json)")
    token = os.environ.get("KSWARM_TOKEN")
    if not token:
        try:
            token = (home / "operator.token").read_text().strip()
        except OSError:
            fail(f"no token: set KSWARM_TOKEN or run `kswarm up` (reads {home}/operator.token)")
    return url.rstrip("/"), token


def get(path: str, **params: Any) -> Any:
    url, token = gateway()
    try:
        reply = httpx.get(url + path, params=params, headers={"Authorization": f"Bearer {token}"}, timeout=60)
    except httpx.TransportError as exc:
        fail(f"cannot reach the gateway at {url}: {exc}")
    if reply.status_code >= 400:
        try:
            detail = reply.json().get("detail", reply.text)
        except ValueError:
            detail = reply.text
        fail(f"{reply.status_code} {detail}")
    return reply.json()


def find_pr(number: int, repo: str | None) -> str:
    """The org/name holding PR ``number``."""
    if repo:
        return repo
    repos = sorted({p["repo"] for p in get("/api/forge/pulls", state="all") if p["number"] == number})
    if not repos:
        fail(f"no PR #{number}")
    if len(repos) > 1:
        fail(f"PR #{number} exists in {', '.join(repos)}: pick one with --repo")
    return repos[0]


def view(number: int, repo: str | None, diff: bool = False) -> dict[str, Any]:
    full = find_pr(number, repo)
    return get(f"/api/forge/repos/{full}/pulls/{number}", diff=str(diff).lower())


def headline(pr: dict[str, Any]) -> str:
    return (
        f'[bold]{pr["repo"]}#{pr["number"]}[/bold] "{pr["title"]}" by @{pr["author"]} '
        f"({pr['head']} -> {pr['base']}, head {(pr.get('head_sha') or '?')[:10]}, {pr['state']})"
    )


def print_why(pr: dict[str, Any]) -> None:
    gate = pr["gate"]
    audit = pr.get("audit") or []
    approvals_counted = gate["approvals"]
    console.print(headline(pr))
    if pr["state"] == "merged":
        # Re-evaluating a merged PR says little (its head is in main now): show the decision that merged it.
        merged = next((e for e in reversed(audit) if e["action"] == "merged"), None)
        if merged is not None:
            approvals_counted = merged.get("approvals") or []
            head = (merged.get("head_sha") or "?")[:10]
            console.print(f"[green]merged[/green] by the gate at head {head}: every rule held")
        console.print(f"merge commit {(pr.get('merge_sha') or '?')[:10]}")
    elif gate["mergeable"]:
        console.print("[green]MERGEABLE[/green]: every rule holds; the gate merges it on its next event")
    else:
        console.print(
            "[red]BLOCKED[/red]:"
            if any(r["blocking"] for r in gate["reasons"])
            else "[yellow]WAITING[/yellow]:"
        )
        for reason in gate["reasons"]:
            mark = "[red]x[/red]" if reason["blocking"] else "[yellow]…[/yellow]"
            console.print(f"  {mark} {reason['message']}  [dim]({reason['code']})[/dim]")
    print_kernels(gate)
    approvals = ", ".join(f"@{a}" for a in approvals_counted) or "none"
    console.print(f"approvals counted: {approvals}")
    for note in gate["notes"]:
        console.print(f"  [dim]note: {note}[/dim]")
    if audit:
        console.print("recent gate decisions:")
        for entry in audit[-5:]:
            when = time.strftime("%H:%M:%S", time.localtime(entry.get("last_ts") or entry["ts"]))
            repeats = f" x{entry['repeats']}" if entry.get("repeats") else ""
            reasons = "; ".join(r["code"] for r in entry["reasons"]) or "-"
            console.print(f"  {when} {entry['action']}{repeats} after {entry['cause']}: {reasons}")


def print_kernels(gate: dict[str, Any]) -> None:
    """Per changed kernel: each required check, the jobs that cover it and their verdicts, or what is
    missing; then the paths only operators may change."""
    kernels = gate.get("kernels") or []
    if kernels:
        console.print("changed kernels:")
    marks = {"success": "[green]ok[/green]", "failure": "[red]x[/red]", "pending": "[yellow]…[/yellow]"}
    for kernel in kernels:
        console.print(
            f"  {kernel['path']} [dim](task {kernel['task']}, {kernel['status']})[/dim]", markup=True
        )
        for check in kernel.get("checks") or []:
            mark = marks.get(check["state"], "[yellow]missing[/yellow]")
            console.print(f"    {mark} {check['context']}: {check['message']}", highlight=False)
            for job in check.get("jobs") or []:
                counts = "" if job["counts"] else " [dim](proves nothing)[/dim]"
                verdict = job.get("verdict") or job["state"]
                console.print(f"        job {job['id']} by @{job['submitter']}: {verdict}{counts}")
    for blocked in gate.get("blocked_paths") or []:
        console.print(f"  [red]trusted[/red] {blocked['path']}: {blocked['why']}", highlight=False)


def register(app: typer.Typer) -> None:
    pr_app = typer.Typer(
        help="Pull requests: show one, or why the gate will or won't merge it.", no_args_is_help=True
    )
    app.add_typer(pr_app, name="pr")

    @app.command("prs")
    def prs(
        repo: RepoOpt = None,
        state: Annotated[str, typer.Option("--state", help="open, closed or all.")] = "open",
        as_json: JsonOpt = False,
    ) -> None:
        """List pull requests with the gate's verdict."""
        params: dict[str, Any] = {"state": state}
        if repo:
            params["repo"] = repo
        rows = get("/api/forge/pulls", **params)
        if as_json:
            print(json.dumps(rows, indent=2))
            return
        if not rows:
            console.print(f"no {state} PRs")
            return
        table = Table("PR", "title", "author", "head", "state", "gate")
        for p in rows:
            gate = p.get("gate")
            verdict = (
                "-" if gate is None else ("[green]mergeable[/green]" if gate["mergeable"] else gate["why"])
            )
            table.add_row(
                f"{p['repo']}#{p['number']}", p["title"], p["author"], p["head"], p["state"], verdict
            )
        console.print(table)

    @pr_app.command("show")
    def show(
        number: Annotated[int, typer.Argument(help="PR number.")],
        repo: RepoOpt = None,
        diff: Annotated[bool, typer.Option("--diff", help="Include the diff.")] = False,
        as_json: JsonOpt = False,
    ) -> None:
        """A PR: reviews, checks, comments and the gate's verdict."""
        pr = view(number, repo, diff)
        if as_json:
            print(json.dumps(pr, indent=2))
            return
        console.print(headline(pr))
        if pr.get("body"):
            console.print(pr["body"])
        for r in pr["reviews"]:
            flags = " (dismissed)" if r["dismissed"] else (" (stale)" if r["stale"] else "")
            console.print(f"  review @{r['user']}: {r['state']} on {r['commit_id'][:10]}{flags} {r['body']}")
        for c in pr["checks"]:
            console.print(f"  check {c['context']}: {c['state']} by @{c['creator']} {c['description']}")
        for c in pr["comments"]:
            console.print(f"  comment @{c['user']}: {c['body']}")
        gate = pr["gate"]
        console.print(
            "gate: "
            + ("mergeable" if gate["mergeable"] else "; ".join(r["message"] for r in gate["reasons"]))
        )
        if diff and pr.get("diff"):
            console.print(pr["diff"], markup=False, highlight=False)

    @pr_app.command("why")
    def why(
        number: Annotated[int, typer.Argument(help="PR number.")],
        repo: RepoOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Why the gate will or won't merge PR N, with its recent decisions."""
        pr = view(number, repo)
        if as_json:
            print(
                json.dumps(
                    {k: pr.get(k) for k in ("repo", "number", "state", "head_sha", "gate", "audit")}, indent=2
                )
            )
            return
        print_why(pr)
