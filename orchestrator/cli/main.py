"""The ``kswarm`` command line, ``kswarm <noun> <verb>``: this module only assembles the noun modules.

Each noun is one module of ``orchestrator.cli`` with a ``register(app)``; what they share is in
``commands`` (the gateway client, the one error handler, the common options) and ``output``.
"""

from __future__ import annotations

import os
import sys

import typer

from orchestrator.cli import (
    agent,
    attention,
    chat,
    cost,
    dataset,
    demo,
    images,
    jobs,
    logs,
    prs,
    swarm,
    tasks,
    ui,
    worker,
)
from orchestrator.cli.commands import root_options


def build_app() -> typer.Typer:
    """The whole ``kswarm`` app, every noun registered."""
    # Plain click help (rich_markup_mode=None): a flag is shown as a flag, not as `--json <bool>`.
    app = typer.Typer(
        help="kswarm: a swarm of LLM agents that write, verify and review kernels.",
        no_args_is_help=True,
        rich_markup_mode=None,
    )
    app.callback()(root_options)
    swarm.register(app)
    logs.register(app)
    agent.register(app)
    attention.register(app)
    chat.register(app)
    prs.register(app)
    jobs.register(app)
    tasks.register(app)
    dataset.register(app)
    cost.register(app)
    demo.register(app)
    images.register(app)
    ui.register(app)
    worker.register(app)
    return app


def main() -> None:
    """Entry point of the ``kswarm`` script."""
    app = build_app()
    if os.environ.get("KSWARM_DEBUG"):
        app()
        return
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
