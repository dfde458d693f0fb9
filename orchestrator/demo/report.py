"""What ``kswarm demo`` prints at the start and the end: the cast, the summary table, the dataset's
paths and counts, the UI's URL, and how to explore (``--keep``) or stop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from orchestrator.demo.launcher import Running
from orchestrator.demo.progress import short


def print_cast(console: Console, running: Running, tasks: tuple[str, ...], model: str) -> None:
    r = running.roster
    body = (
        f"lead [bold]{r.lead}[/] · developers [bold]{', '.join(r.developers)}[/] · "
        f"reviewers [bold]{', '.join(r.reviewers)}[/]\n"
        f"model {model} · backend {running.backend} · pool cpu (Triton interpreter) · "
        f"repo kswarm/dataset\n"
        f"tasks: {', '.join(tasks)}\n"
        f"gateway {running.url} · UI {running.url}/ui · home {running.home}"
    )
    console.print(Panel(body, title="kswarm demo", expand=False))
    for warning in running.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")


def job_chain(jobs: list[dict[str, Any]]) -> str:
    marks = []
    for j in jobs:
        if j.get("verdict") == "pass":
            marks.append(f"[green]✓[/] {j['id'][-6:]}")
        else:
            why = ", ".join(j.get("flags") or []) or j.get("verdict") or j.get("state")
            marks.append(f"[red]✗[/] {j['id'][-6:]} ({why})")
    return " → ".join(marks)


def print_summary(
    console: Console, summary: dict[str, Any], running: Running, keep: bool, ui: list[str] | None = None
) -> None:
    """What the demo did; then, with ``--keep``, the UI's lines (``ui``: its URL and a one-time login
    link), else how to keep it up: no link to a UI that is about to stop."""
    table = Table(title="What happened", title_justify="left")
    for column in ("task", "author", "PR", "reviews", "jobs (verdicts in order)", "merged as"):
        table.add_column(column)
    for row in summary["tasks"]:
        reviews = ", ".join(
            f"{r['user']} {'approved' if r['state'] == 'APPROVED' else r['state'].lower()}"
            for r in row["reviews"]
        )
        merged = short(row["merge"]) if row["pr_state"] == "merged" else f"[red]{row['pr_state'] or '-'}[/]"
        table.add_row(
            row["task"],
            row["author"] or "-",
            f"#{row['pr']}" if row["pr"] else "-",
            reviews,
            job_chain(row["jobs"]),
            merged,
        )
    console.print(table)
    data = summary["dataset"]
    s = data["summary"]
    pools = ", ".join(
        f"{p} {c['passed']}/{c['records']} passed ({c['pass_rate']:.0%})" for p, c in s["pools"].items()
    )
    per_task = ", ".join(f"{t} {c['accepted']}" for t, c in s["by_task"].items())
    paths = "\n".join(f"  {name:8} {path}" for name, path in data["paths"].items())
    outcome = "[green]done[/]" if summary["ok"] else "[red]not finished[/]"
    console.print(
        Panel(
            f"{outcome} in {summary['elapsed_s']:.0f}s · {s['records']} verification records, "
            f"[bold]{s['accepted']} accepted[/] over {s['tasks_with_accepted']} tasks\n"
            f"accepted per task: {per_task}\npools: {pools}\n{paths}",
            title="dataset (kswarm dataset build)",
            expand=False,
        )
    )
    if keep:
        for line in ui or [f"UI: {running.url}/ui  (`kswarm ui` makes a login link)"]:
            console.print(line, soft_wrap=True, markup=False, highlight=False)  # a link is never wrapped
        print_explore(console, running.home)
    else:
        console.print("The UI stops with the demo; to keep it up and explore: ./kswarm demo --keep")


def print_explore(console: Console, home: Path) -> None:
    console.print(
        Panel(
            "Everything keeps running. In another terminal:\n"
            f"  export KSWARM_HOME={home}\n"
            "  kswarm ps                                # the agents\n"
            "  kswarm chat tail -f                      # the group chat, live\n"
            "  kswarm prs --state all                   # pull requests\n"
            "  kswarm pr why 1 --repo kswarm/dataset    # why the gate merged it\n"
            "  kswarm jobs                              # jobs and their results\n"
            "  kswarm dataset build --repo kswarm/dataset\n"
            "Stop everything: Ctrl-C here, or `kswarm down` there.",
            title="exploring (--keep)",
            expand=False,
        )
    )
