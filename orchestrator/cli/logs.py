"""``kswarm logs [AGENT...] [-f]``: agents' output, like ``docker compose logs``: every agent of the
swarm (or the named ones), each line after its agent's name; ``-f`` follows them all at once, one
reader thread per agent feeding one queue that this command prints from. One named agent's lines are
printed as they are (what ``kswarm logs NAME`` always printed). The command is ``logs`` (``main``
names it)."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator
from typing import Annotated

import typer

from orchestrator.cli import complete
from orchestrator.cli.commands import HomeOpt
from orchestrator.cli.output import colour_of, console, safe, warn
from orchestrator.cli.swarm import Ctx, load_ctx
from orchestrator.runtime.base import AgentRuntime


def swarm_agent_names(ctx: Ctx) -> list[str]:
    """Every agent of the swarm: the spec's, and any other the swarm's record or its backend knows."""
    named = [a.name for a in ctx.spec.expand()]
    others = (set(ctx.info.agents) | set(ctx.runtime.list())) - set(named)
    return named + sorted(others)


def agent_log_lines(
    runtime: AgentRuntime, names: list[str], follow: bool, tail: int | None
) -> Iterator[tuple[str, str]]:
    """(agent, line) of each agent's output: one agent after the other, or with ``follow`` all at once
    as the lines come (one reader thread per agent; it ends when every agent's output has ended)."""
    if not follow:
        for name in names:
            for line in runtime.logs(name, tail=tail):
                yield name, line
        return
    lines: queue.Queue[tuple[str, str | Exception | None]] = queue.Queue()

    def read(name: str) -> None:
        try:
            for line in runtime.logs(name, follow=True, tail=tail):
                lines.put((name, line))
        except Exception as exc:  # one agent's unreadable output (docker gone) must not end the others'
            lines.put((name, exc))
        finally:
            lines.put((name, None))  # this agent's output ended

    for name in names:
        threading.Thread(target=read, args=(name,), name=f"kswarm-logs-{name}", daemon=True).start()
    open_streams = len(names)
    while open_streams:
        name, item = lines.get()
        if item is None:
            open_streams -= 1
        elif isinstance(item, Exception):
            warn(f"{name}'s output cannot be read: {type(item).__name__}: {item}")
        else:
            yield name, item


def logs(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            help="Agents (default: every agent of the swarm).", autocompletion=complete.agent_names
        ),
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
    tail: Annotated[int | None, typer.Option(help="Only the last N lines (of each agent).")] = None,
    home: HomeOpt = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="JSON Lines: {agent, line} per output line.")
    ] = False,
) -> None:
    """Agents' output, each line after its agent's name (like `docker compose logs`); one named
    agent's lines as they are. -f follows every agent shown at once."""
    ctx = load_ctx(home)
    chosen = [ctx.agent(name).name for name in names] if names else swarm_agent_names(ctx)
    prefixed = len(names or []) != 1
    width = max((len(n) for n in chosen), default=0)

    def show(name: str, line: str) -> None:
        text = line.rstrip("\n")
        if as_json:
            print(json.dumps({"agent": name, "line": text}), flush=True)
        elif prefixed:
            console.print(
                f"[{colour_of(name)}]{safe(name.ljust(width))} |[/] {safe(text)}",
                highlight=False,
                soft_wrap=True,
            )
            console.file.flush()
        else:
            typer.echo(text)

    try:
        for name, line in agent_log_lines(ctx.runtime, chosen, follow, tail):
            show(name, line)
    except KeyboardInterrupt:
        pass
