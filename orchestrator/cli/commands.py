"""What every noun module builds its commands from.

- ``command(app, name)`` declares a command (a group's, in its noun's module; a top-level verb's, in
  ``main``). It is the one CLI handler of the client's errors: a ``GatewayCallError`` raised anywhere in
  the command ends it with the error's one line and its class's exit code (``docs/cli.md``). Commands
  never catch them to print a table anyway.
- ``connect(home)`` is the one way a command reaches the gateway (``gateway.client.find_gateway``:
  ``--home``/``KSWARM_HOME``, ``KSWARM_URL``/``KSWARM_TOKEN``).
- ``HomeOpt`` and ``JsonOpt`` are the options every command that reaches the gateway (or lists
  something) takes, spelled once.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar

import typer

from gateway.client import GatewayCallError, GatewayClient, find_gateway
from orchestrator.cli.output import fail

P = ParamSpec("P")
R = TypeVar("R")

CLI_TIMEOUT_S = 60.0
HANDLED = "__kswarm_gateway_errors_handled__"

HomeOpt = Annotated[
    Path | None,
    typer.Option("--home", help="Data dir of the kswarm to use (default $KSWARM_HOME or ~/.kswarm)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("kswarm")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"kswarm {version()}")
        raise typer.Exit(0)


def root_options(
    show_version: Annotated[
        bool,
        typer.Option("--version", help="Print the version and exit.", callback=_print_version, is_eager=True),
    ] = False,
) -> None:
    """kswarm: a swarm of LLM agents that write, verify and review kernels."""


def handle_gateway_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` with the client's errors turned into ``error: <line>`` and the class's exit code."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except GatewayCallError as exc:
            fail(exc.line(), exc.exit_code)

    setattr(wrapper, HANDLED, True)
    return wrapper


def command(
    app: typer.Typer, name: str | None = None, **options: Any
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """``@app.command(name)`` with the one error handler around the command."""

    def declare(fn: Callable[P, R]) -> Callable[P, R]:
        app.command(name, **options)(handle_gateway_errors(fn))
        return fn

    return declare


def connect(home: Path | None, timeout: float = CLI_TIMEOUT_S) -> GatewayClient:
    """A client for the gateway this command should use; ``NoGateway`` says what to do if there is none."""
    return GatewayClient(dataclasses.replace(find_gateway(home), timeout=timeout))
