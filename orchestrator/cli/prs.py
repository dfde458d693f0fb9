"""``kswarm prs``, ``kswarm pr show|why N`` (pull requests and the review gate's reasons) and the
operator's ``kswarm pr review N --approve|--request-changes|--comment -m ...`` and ``kswarm pr comment N
-m ...``.

``prs`` is the top-level command and ``app`` the ``pr`` group (``main`` assembles them); the gateway is
found like every command's (``commands.connect``). Reviews and comments go through the monitor's
operator actions (``/api/actions/prs/...``): the same code as the UI's buttons, audited in
``/api/monitor/actions`` and announced in ``#reviews`` to the PR's author; the gate then re-decides the
PR, counting the review under ``review.human_approvals``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.table import Table

from gateway.client import BadInput, GatewayClient, Missing
from gateway.forge.gate.evidence import evidence_rank
from orchestrator.cli.commands import HomeOpt, JsonOpt, command, connect
from orchestrator.cli.output import console, print_json, safe

PRState = Literal["open", "merged", "closed", "all"]
RepoOpt = Annotated[str | None, typer.Option("--repo", "-r", help="org/name (needed when N is ambiguous).")]


def checked_repo(repo: str | None) -> str | None:
    """``--repo`` as org/name; anything else is bad input, not a 404 from a route that does not exist."""
    if repo is not None and (repo.count("/") != 1 or not all(repo.split("/"))):
        raise BadInput(0, f"--repo is org/name, not {repo!r}")
    return repo


def find_pr(gateway: GatewayClient, number: int, repo: str | None) -> str:
    """The org/name holding PR ``number``."""
    if repo:
        return repo
    pulls = gateway.get("/api/forge/pulls", state="all")
    repos = sorted({p["repo"] for p in pulls if p["number"] == number})
    if not repos:
        raise Missing(0, f"no PR #{number} in any repo")
    if len(repos) > 1:
        raise BadInput(0, f"PR #{number} exists in {', '.join(repos)}: pick one with --repo")
    return repos[0]


def act(home: Path | None, number: int, repo: str | None, verb: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST the operator action ``verb`` (review, comment) on PR ``number``; the action's result."""
    with connect(home) as gateway:
        full = find_pr(gateway, number, checked_repo(repo))
        result: dict[str, Any] = gateway.request(
            "POST", f"/api/actions/prs/{full}/{number}/{verb}", json=body
        )
        return result


def review_event(approve: bool, request_changes: bool, comment: bool) -> str:
    """The one review event the flags name; BadInput unless exactly one is given."""
    chosen = [
        e
        for e, on in (("approve", approve), ("request_changes", request_changes), ("comment", comment))
        if on
    ]
    if len(chosen) != 1:
        raise BadInput(0, "give exactly one of --approve, --request-changes, --comment")
    return chosen[0]


def view(home: Path | None, number: int, repo: str | None, diff: bool = False) -> dict[str, Any]:
    with connect(home) as gateway:
        full = find_pr(gateway, number, checked_repo(repo))
        return gateway.get(f"/api/forge/repos/{full}/pulls/{number}", diff=str(diff).lower())


def headline(pr: dict[str, Any]) -> str:
    return (
        f'[bold]{safe(pr["repo"])}#{pr["number"]}[/bold] "{safe(pr["title"])}" by @{safe(pr["author"])} '
        f"({safe(pr['head'])} -> {safe(pr['base'])}, head {safe((pr.get('head_sha') or '?')[:10])}, "
        f"{safe(pr['state'])})"
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
            head = safe((merged.get("head_sha") or "?")[:10])
            console.print(f"[green]merged[/green] by the gate at head {head}: every rule held")
        console.print(f"merge commit {safe((pr.get('merge_sha') or '?')[:10])}")
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
            console.print(f"  {mark} {safe(reason['message'])}  [dim]({safe(reason['code'])})[/dim]")
    print_kernels(gate)
    approvals = ", ".join(f"@{safe(a)}" for a in approvals_counted) or "none"
    console.print(f"approvals counted: {approvals}")
    for note in gate["notes"]:
        console.print(f"  [dim]note: {safe(note)}[/dim]")
    if audit:
        console.print("recent gate decisions:")
        for entry in audit[-5:]:
            when = time.strftime("%H:%M:%S", time.localtime(entry.get("last_ts") or entry["ts"]))
            repeats = f" x{entry['repeats']}" if entry.get("repeats") else ""
            reasons = "; ".join(safe(r["code"]) for r in entry["reasons"]) or "-"
            console.print(
                f"  {when} {safe(entry['action'])}{repeats} after {safe(entry['cause'])}: {reasons}"
            )


def print_kernels(gate: dict[str, Any]) -> None:
    """Per changed kernel: each required check, the jobs that cover it and their verdicts, or what is
    missing; then the paths only operators may change."""
    kernels = gate.get("kernels") or []
    if kernels:
        console.print("changed kernels:")
    marks = {
        "success": "[green]ok[/green]",
        "failure": "[red]x[/red]",
        "insufficient": "[red]x[/red]",
        "pending": "[yellow]…[/yellow]",
    }
    for kernel in kernels:
        console.print(
            f"  {safe(kernel['path'])} [dim](task {safe(kernel['task'])}, {safe(kernel['status'])})[/dim]",
            markup=True,
        )
        console.print(f"    {evidence_line(kernel)}", highlight=False)
        for check in kernel.get("checks") or []:
            mark = marks.get(check["state"], "[yellow]missing[/yellow]")
            console.print(f"    {mark} {safe(check['context'])}: {safe(check['message'])}", highlight=False)
            for job in check.get("jobs") or []:
                counts = "" if job["counts"] else " [dim](proves nothing)[/dim]"
                verdict = safe(job.get("verdict") or job["state"])
                if verdict == "pass" and job.get("evidence"):
                    verdict = f"pass ({safe(job['evidence'])})"
                console.print(
                    f"        job {safe(job['id'])} by @{safe(job['submitter'])}: {verdict}{counts}"
                )
    for blocked in gate.get("blocked_paths") or []:
        console.print(
            f"  [red]trusted[/red] {safe(blocked['path'])}: {safe(blocked['why'])}", highlight=False
        )


def evidence_line(kernel: dict[str, Any]) -> str:
    """What the kernel's passes prove and, under a policy minimum it misses, what is required."""
    have = kernel.get("evidence") or "none"
    need = kernel.get("required_evidence")
    if need is None:
        return f"evidence: {safe(have)} (no kswarm check required)"
    states = {c.get("state") for c in kernel.get("checks") or []}
    if "insufficient" in states:
        return f"evidence: {safe(have)} [red]insufficient[/red]: the policy requires {safe(need)}"
    if evidence_rank(have) >= evidence_rank(need):
        return f"evidence: {safe(have)} (the policy requires {safe(need)})"
    return f"evidence: {safe(have)} so far (the policy requires {safe(need)})"


app = typer.Typer(
    help="Pull requests: show one, or why the gate will or won't merge it.", no_args_is_help=True
)


def prs(
    repo: RepoOpt = None,
    state: Annotated[
        PRState,
        typer.Option("--state", help="open, merged, closed (merged or not) or all."),
    ] = "open",
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List pull requests with the gate's verdict; each PR's state is open, merged or closed."""
    asked = "closed" if state == "merged" else state  # the gateway's closed ones include the merged
    with connect(home) as gateway:
        rows = gateway.get("/api/forge/pulls", state=asked, repo=checked_repo(repo))
    rows = [p for p in rows if state != "merged" or p["state"] == "merged"]
    if as_json:
        print_json(rows)
        return
    if not rows:
        console.print(f"no {state} PRs")
        return
    table = Table("PR", "title", "author", "head", "state", "gate")
    for p in rows:
        gate = p.get("gate")
        verdict = (
            "-" if gate is None else ("[green]mergeable[/green]" if gate["mergeable"] else safe(gate["why"]))
        )
        table.add_row(
            f"{safe(p['repo'])}#{p['number']}",
            *(safe(p[k]) for k in ("title", "author", "head", "state")),
            verdict,
        )
    console.print(table)


@command(app, "show")
def show(
    number: Annotated[int, typer.Argument(help="PR number.")],
    repo: RepoOpt = None,
    diff: Annotated[bool, typer.Option("--diff", help="Include the diff.")] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A PR: reviews, checks, comments and the gate's verdict."""
    pr = view(home, number, repo, diff)
    if as_json:
        print_json(pr)
        return
    console.print(headline(pr))
    if pr.get("body"):
        console.print(safe(pr["body"]), highlight=False)
    for r in pr["reviews"]:
        flags = " (dismissed)" if r["dismissed"] else (" (stale)" if r["stale"] else "")
        console.print(
            f"  review @{safe(r['user'])}: {safe(r['state'])} on {safe(r['commit_id'][:10])}{flags} "
            f"{safe(r['body'])}",
            highlight=False,
        )
    for c in pr["checks"]:
        console.print(
            f"  check {safe(c['context'])}: {safe(c['state'])} by @{safe(c['creator'])} "
            f"{safe(c['description'])}",
            highlight=False,
        )
    for c in pr["comments"]:
        console.print(f"  comment @{safe(c['user'])}: {safe(c['body'])}", highlight=False)
    gate = pr["gate"]
    console.print(
        "gate: "
        + ("mergeable" if gate["mergeable"] else "; ".join(safe(r["message"]) for r in gate["reasons"])),
        highlight=False,
    )
    if diff and pr.get("diff"):
        console.print(safe(pr["diff"], markup=False), markup=False, highlight=False)


@command(app, "review")
def review(
    number: Annotated[int, typer.Argument(help="PR number.")],
    approve: Annotated[bool, typer.Option("--approve", help="Approve the PR at its head.")] = False,
    request_changes: Annotated[
        bool, typer.Option("--request-changes", help="Request changes (blocks the merge).")
    ] = False,
    comment: Annotated[bool, typer.Option("--comment", help="A review that only comments.")] = False,
    message: Annotated[str, typer.Option("-m", "--message", help="The review's text.")] = "",
    head: Annotated[
        str, typer.Option("--head", help="Only if the PR's head is still this sha (refused if it moved).")
    ] = "",
    repo: RepoOpt = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Review PR N as the operator (audited; counts for review.human_approvals)."""
    event = review_event(approve, request_changes, comment)
    if event != "approve" and not message.strip():
        raise BadInput(0, "-m is needed to request changes or comment")
    result = act(home, number, repo, "review", {"event": event, "body": message, "head_sha": head})
    if as_json:
        print_json(result)
        return
    console.print(safe(result["message"]), highlight=False)


@command(app, "comment")
def comment_on(
    number: Annotated[int, typer.Argument(help="PR number.")],
    message: Annotated[str, typer.Option("-m", "--message", help="The comment.")] = "",
    repo: RepoOpt = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Comment on PR N as the operator (audited; the author is told in #reviews)."""
    if not message.strip():
        raise BadInput(0, "-m is needed: the comment's text")
    result = act(home, number, repo, "comment", {"body": message})
    if as_json:
        print_json(result)
        return
    console.print(safe(result["message"]), highlight=False)


@command(app, "why")
def why(
    number: Annotated[int, typer.Argument(help="PR number.")],
    repo: RepoOpt = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Why the gate will or won't merge PR N, with its recent decisions."""
    pr = view(home, number, repo)
    if as_json:
        print_json({k: pr.get(k) for k in ("repo", "number", "state", "head_sha", "gate", "audit")})
        return
    print_why(pr)
