"""Live progress of the demo: one line per change (always), and a live board on a terminal (rich).

The driver polls the gateway into a ``Snapshot``; ``changes(before, after)`` turns two snapshots into
the lines a human wants to read ("dev-1 claimed `add`", "job j... failed: mismatch", "rev-1 requested
changes on PR #5", "gate merged PR #5"), and ``board()`` renders the current state.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

JOB_MARK = {"succeeded": "[green]✓[/]", "failed": "[red]✗[/]", "error": "[red]![/]", "timeout": "[red]⏱[/]"}


@dataclass
class Snapshot:
    """What the gateway says at one moment (REST shapes, keyed for diffing)."""

    elapsed: float = 0.0
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    prs: dict[int, dict[str, Any]] = field(default_factory=dict)  # summary + view (reviews, ...)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    counterexamples: list[dict[str, Any]] = field(default_factory=list)  # oldest first

    def counts(self) -> dict[str, Counter[str]]:
        return {
            "tasks": Counter(t.get("state", "?") for t in self.tasks.values()),
            "prs": Counter(p.get("state", "?") for p in self.prs.values()),
            "jobs": Counter(j.get("state", "?") for j in self.jobs.values()),
        }

    def jobs_for(self, task: str) -> list[dict[str, Any]]:
        return sorted((j for j in self.jobs.values() if j.get("task") == task), key=lambda j: j["id"])

    def pr_for(self, task: str) -> dict[str, Any] | None:
        found = [p for p in self.prs.values() if str(p.get("head", "")).endswith(f"/{task}")]
        return max(found, key=lambda p: p["number"]) if found else None


def short(sha: Any) -> str:
    return str(sha or "")[:10]


def job_flags(job: dict[str, Any]) -> str:
    result = job.get("result") or {}
    flags = result.get("flags") or job.get("flags") or []
    return ", ".join(flags) or str(job.get("error") or job.get("verdict") or "")


def changes(before: Snapshot, after: Snapshot) -> list[str]:
    """Human-readable lines for everything that changed between two snapshots, in causal order:
    tasks posted and claimed, PRs opened, jobs, reviews, merges, tasks done."""
    posted: list[str] = []
    early: list[str] = []  # claimed, opened
    jobs: list[str] = []
    late: list[str] = []  # reviews, merges
    done: list[str] = []
    for tid, t in after.tasks.items():
        old = before.tasks.get(tid)
        if old is None:
            posted.append(f"[bold]{t.get('posted_by')}[/] posted task `{tid}`: {t.get('title', '')}")
        if t.get("state") == "claimed" and (old is None or old.get("holder") != t.get("holder")):
            early.append(f"[bold]{t.get('holder')}[/] claimed `{tid}`")
        if t.get("state") == "done" and (old is None or old.get("state") != "done"):
            done.append(f"[bold]{t.get('done_by')}[/] finished `{tid}`: {t.get('result') or ''}")
    for n, pr in sorted(after.prs.items()):
        old = before.prs.get(n)
        if old is None:
            who = ", ".join(pr.get("requested_reviewers") or []) or "nobody"
            early.append(f"[bold]{pr.get('author')}[/] opened PR #{n} {pr.get('title')!r}, review by {who}")
        seen = len((old or {}).get("reviews") or [])
        for review in (pr.get("reviews") or [])[seen:]:
            colour = "green" if review.get("state") == "APPROVED" else "yellow"
            late.append(
                f"[bold]{review.get('user')}[/] [{colour}]{review.get('state')}[/] PR #{n} at "
                f"{short(review.get('commit_id'))}"
            )
        if pr.get("state") == "merged" and (old is None or old.get("state") != "merged"):
            late.append(f"[bold]gate[/] merged PR #{n} into main as {short(pr.get('merge_sha'))}")
    for jid, job in sorted(after.jobs.items()):
        old = before.jobs.get(jid)
        state = job.get("state")
        if old is None:
            who = f"`{job.get('task')}` by {job.get('submitter')} @ {short(job.get('sha'))}"
            jobs.append(f"job {jid} [dim]queued[/]: {who}")
        if old is not None and old.get("state") == state:
            continue
        if state == "running":
            jobs.append(f"job {jid} [cyan]running[/] on {job.get('node')} slot {job.get('allocated')}")
        elif state in JOB_MARK:
            tail = f": {job_flags(job)}" if state != "succeeded" else f": {job.get('verdict')}"
            jobs.append(f"job {jid} {JOB_MARK[state]} {state}{tail}")
    return posted + early + jobs + late + done


def board(snap: Snapshot, title: str, tasks: list[str]) -> RenderableType:
    """The live board: one row per task, counters, agents and the latest chat."""
    table = Table(title=title, title_justify="left", expand=False)
    for column in ("task", "holder", "PR", "jobs", "reviews", "state"):
        table.add_column(column)
    for task in tasks:
        t = snap.tasks.get(task, {})
        pr = snap.pr_for(task)
        jobs = " ".join(JOB_MARK.get(j.get("state", ""), "[dim]…[/]") for j in snap.jobs_for(task))
        reviews = ", ".join(
            f"{r.get('user')}:{'✓' if r.get('state') == 'APPROVED' else '✗'}"
            for r in (pr or {}).get("reviews", [])
        )
        state = (pr or {}).get("state") if pr and pr.get("state") == "merged" else t.get("state", "-")
        table.add_row(
            task,
            t.get("holder") or t.get("done_by") or "",
            f"#{pr['number']}" if pr else "",
            jobs,
            reviews,
            str(state),
        )
    c = snap.counts()
    totals = Text.from_markup(
        f"tasks {dict(c['tasks'])}   PRs {dict(c['prs'])}   jobs {dict(c['jobs'])}   "
        f"[dim]{snap.elapsed:.0f}s[/]"
    )
    agents = Text.from_markup(
        "   ".join(f"[bold]{n}[/] {a.get('state') or '-'}" for n, a in sorted(snap.agents.items()))
    )
    chat = []
    for m in snap.messages[-6:]:
        line = Text.from_markup(f"[dim]#{m.get('channel')}[/] [bold]{m.get('sender')}[/]: ") + Text(m["text"])
        line.no_wrap, line.overflow = True, "ellipsis"
        chat.append(line)
    return Group(table, totals, agents, *chat)


class ProgressView:
    """Prints change lines; on a terminal also keeps a live board under them."""

    def __init__(self, console: Console, title: str, tasks: list[str]) -> None:
        self.console = console
        self.title = title
        self.tasks = tasks
        self.last = Snapshot()
        self.started = time.monotonic()
        self.live: Live | None = None

    def __enter__(self) -> ProgressView:
        if self.console.is_terminal:
            self.live = Live(console=self.console, refresh_per_second=4, transient=True)
            self.live.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def log(self, line: str) -> None:
        stamp = f"[dim]{time.monotonic() - self.started:6.1f}s[/] "
        self.console.print(stamp + line, highlight=False)

    def update(self, snap: Snapshot) -> None:
        for line in changes(self.last, snap):
            self.log(line)
        self.last = snap
        if self.live is not None:
            self.live.update(board(snap, self.title, self.tasks))
