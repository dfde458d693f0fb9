"""``kswarm attention``: everything that needs a human now, newest first (the UI's Attention, on top of
its landing page, the Overview).

``attention`` is the command (``main`` names it); it reads ``GET /api/attention`` (operators
only, served by the gateway's monitor plugin) through ``commands.connect`` like every command.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from orchestrator.cli.commands import HomeOpt, JsonOpt, connect
from orchestrator.cli.output import console, print_json, safe, since

SEVERITY_STYLE = {"critical": "red", "warning": "yellow", "info": "cyan"}


def print_report(report: dict[str, Any]) -> None:
    items = report.get("items") or []
    missing = {name: why for name, why in (report.get("sources") or {}).items() if why != "ok"}
    if not items:
        console.print("[green]nothing needs you now[/green]")
    else:
        table = Table("severity", "what", "why", "since", "look at")
        for item in items:
            style = SEVERITY_STYLE.get(item["severity"], "white")
            table.add_row(
                f"[{style}]{safe(item['severity'])}[/{style}]",
                safe(item["title"]),
                safe(item["reason"]),
                since(item.get("since")),
                safe(item.get("link") or "-"),
            )
        console.print(table)
    # A source the monitor could not read is said, not hidden: "nothing" must not mean "could not look".
    for name, why in sorted(missing.items()):
        console.print(f"[dim]not checked: {safe(name)}: {safe(why)}[/dim]", highlight=False)


def attention(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """What needs a human now: stalled agents, blocked PRs, failed jobs, budgets, claims, ..."""
    with connect(home) as gateway:
        report = gateway.get("/api/attention")
    if as_json:
        print_json(report)
        return
    print_report(report)
