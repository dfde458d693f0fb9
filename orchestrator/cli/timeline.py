"""``kswarm agent timeline NAME [-f]``: what an agent did, wake by wake, from its reported timeline.

The command is ``timeline``, added to the ``agent`` group by ``orchestrator/cli/agent.py``. It reads
``GET /api/agents/NAME/timeline`` (the gateway's monitor plugin; operators read every agent's, an agent
only its own). ``-f`` keeps printing new entries by paging forward from the newest one seen: a polled
page, so a dropped connection or a restarted gateway loses nothing (the ids are the stream's).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import typer

from gateway.client import BadInput, GatewayClient, Missing
from orchestrator.cli.commands import HomeOpt, connect
from orchestrator.cli.output import colour_of, console, print_json, safe

KIND_STYLE = {
    "wake": "bold cyan",
    "model": "magenta",
    "tool_call": "yellow",
    "tool_result": "green",
    "error": "bold red",
    "stop": "dim",
    "start": "bold",
    "compaction": "blue",
    "note": "dim",
}
PAGE = 100


def entry_id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def entry_line(entry: dict[str, Any]) -> str:
    when = time.strftime("%H:%M:%S", time.localtime(entry["ts"]))
    style = KIND_STYLE.get(entry["kind"], "white")
    cost = f" [dim](${entry['cost_usd']:.4f})[/dim]" if entry.get("cost_usd") else ""
    kind = safe(f"{entry['kind']:<11}")
    return f"{when} [{style}]{kind}[/{style}] {safe(entry.get('summary'))}{cost}"


def newer_than(
    gateway: GatewayClient, name: str, after: str | None, kinds: str | None
) -> list[dict[str, Any]]:
    """Every entry after ``after`` (all of the newest page when None), oldest first."""
    out: list[dict[str, Any]] = []
    before: str | None = None
    while True:
        page = gateway.get(f"/api/agents/{name}/timeline", limit=PAGE, before=before, kind=kinds)
        fresh = [e for e in page["entries"] if after is None or entry_id_key(e["id"]) > entry_id_key(after)]
        out += fresh
        if after is None or len(fresh) < len(page["entries"]) or not page["more"]:
            break
        before = page["entries"][-1]["id"]
    return sorted(out, key=lambda e: entry_id_key(e["id"]))


def check_agent(gateway: GatewayClient, name: str, page: dict[str, Any]) -> None:
    """``Missing`` when ``name`` is no agent of this gateway: the timeline route answers any name with an
    empty page, and "no entries yet" must not stand for "no such agent". Asked only of an empty page
    (an agent with entries exists)."""
    if page["entries"] or page.get("doing"):
        return
    names = sorted(a["name"] for a in gateway.agents())
    if name not in names:
        raise Missing(0, f"no agent {name!r} at this gateway (agents: {', '.join(names) or 'none'})")


def follow(
    gateway: GatewayClient,
    name: str,
    after: str | None,
    kinds: str | None,
    poll_s: float = 1.0,
    keep_going: Callable[[], bool] = lambda: True,
) -> Iterator[dict[str, Any]]:
    """New entries of ``name``'s timeline as they are reported, oldest first, while ``keep_going()``."""
    while keep_going():
        fresh = newer_than(gateway, name, after or "0-0", kinds)  # "0-0": nothing seen yet
        for entry in fresh:
            after = entry["id"]
            yield entry
        if not fresh:
            time.sleep(poll_s)


def timeline(
    name: Annotated[str, typer.Argument(help="The agent.")],
    lines: Annotated[int, typer.Option("-n", help="How many recent entries to print first.")] = 30,
    follow_new: Annotated[bool, typer.Option("-f", "--follow", help="Keep printing new entries.")] = False,
    search: Annotated[str, typer.Option("--search", "-q", help="Only entries containing these words.")] = "",
    kind: Annotated[
        str | None,
        typer.Option("--kind", help="Only these kinds (comma-separated: tool_call,model,...)."),
    ] = None,
    home: HomeOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per entry.")] = False,
) -> None:
    """An agent's wakes, model calls (tokens, cost, latency), tool calls and results, in order."""
    if lines < 1 or lines > 500:
        raise BadInput(0, f"-n is 1..500, not {lines}")
    if follow_new and search:
        raise BadInput(0, "--search cannot be combined with -f")
    with connect(home) as gateway:
        page = gateway.get(f"/api/agents/{name}/timeline", limit=lines, q=search or None, kind=kind)
        check_agent(gateway, name, page)
        entries = list(reversed(page["entries"]))
        if not as_json:
            doing = f": {safe(page['doing'])}" if page.get("doing") else ""
            console.print(f"[bold {colour_of(name)}]{safe(name)}[/bold {colour_of(name)}]{doing}")
            if not entries:
                console.print("[dim]no timeline entries yet[/dim]")
        for entry in entries:
            show(entry, as_json)
        console.file.flush()
        if not follow_new:
            return
        last = entries[-1]["id"] if entries else None
        try:
            for entry in follow(gateway, name, last, kind):
                show(entry, as_json)
                console.file.flush()
        except KeyboardInterrupt:
            return


def show(entry: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(entry, indent=None)
    else:
        console.print(entry_line(entry), highlight=False, soft_wrap=True)
