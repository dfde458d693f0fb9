"""How every ``kswarm`` command prints: the consoles, untrusted text made safe (``safe``), one-line
errors, JSON, agents' colours, ages.

The consoles wrap at the terminal's width only when they print to a terminal: into a pipe or a file
(``kswarm prs | grep``, a script, a log) a line is one line however long, where Rich alone would cut
it at 80 columns (or at the width of a terminal the command's stdin happens to be)."""

from __future__ import annotations

import json
import time
import zlib
from typing import Any, NoReturn

import typer
from rich.console import Console, ConsoleDimensions
from rich.markup import escape

from gateway.client.text import visible

UNWRAPPED_WIDTH = 1_000_000
"""The width a console renders at when it does not print to a terminal: no line is ever that long, so
none is wrapped; tables are as wide as their cells (they do not expand to the width)."""


class PipeAwareConsole(Console):
    """A Rich console that wraps only on a terminal (what it prints to decides, at print time)."""

    @property
    def size(self) -> ConsoleDimensions:
        if not self.is_terminal:
            return ConsoleDimensions(UNWRAPPED_WIDTH, super().size.height)
        return super().size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]


# rich resolves sys.stdout/sys.stderr at print time, so these follow typer's test runner too.
console = PipeAwareConsole()
err_console = PipeAwareConsole(stderr=True)


def safe(text: object, markup: bool = True) -> str:
    """Text the gateway hands out (anything an agent or a worker wrote: chat, PR titles and bodies,
    reviews, task titles, timelines, ``doing``, job errors and logs, names) ready for the terminal: each
    control character shown as its escape (ESC as the four characters ``\\x1b``), and, for a Rich
    console (``markup``), each markup tag as the text it is. For ``typer.echo``: ``markup=False``.
    ``--json`` needs neither: the JSON encoder escapes control characters itself."""
    shown = visible("" if text is None else str(text))
    return escape(shown) if markup else shown


AGENT_COLOURS = ["cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta"]


def fail(message: str, code: int = 1) -> NoReturn:
    """End the command: ``error: <message>`` on one line of stderr (never wrapped), exit ``code``."""
    line = " ".join(message.split())
    err_console.print(f"[red]error:[/red] {safe(line)}", soft_wrap=True, highlight=False)
    raise typer.Exit(code)


def fail_each(problems: list[str], code: int = 2) -> NoReturn:
    """End the command with one ``error: <problem>`` line per problem (a spec with several problems)."""
    for problem in problems:
        line = " ".join(problem.split())
        err_console.print(f"[red]error:[/red] {safe(line)}", soft_wrap=True, highlight=False)
    raise typer.Exit(code)


def warn(message: str) -> None:
    err_console.print(f"[yellow]warning:[/yellow] {safe(message)}", soft_wrap=True, highlight=False)


def print_json(data: Any, indent: int | None = 2) -> None:
    """JSON on stdout, nothing else (``--json``): scripts parse it."""
    typer.echo(json.dumps(data, indent=indent))


def colour_of(name: str) -> str:
    """An agent's colour, the same in every command and every run."""
    return AGENT_COLOURS[zlib.crc32(name.encode()) % len(AGENT_COLOURS)]


def age(seconds: float | None) -> str:
    """A duration as ``12s``, ``3.5m``, ``2.0h``, ``1.2d`` (``-`` when unknown)."""
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def since(ts: float | None) -> str:
    """How long ago a Unix time was (``-`` when unset)."""
    return "-" if not ts else age(max(0.0, time.time() - ts))
