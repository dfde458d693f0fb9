"""The ``kswarm`` command line, ``kswarm <noun> <verb>``: this module only assembles the noun modules.

Each noun is one module of ``orchestrator.cli`` with a ``register(app)``; what they share is in
``commands`` (the gateway client, the one error handler, the common options) and ``output``.
"""

from __future__ import annotations

import os
import sys

import typer

from orchestrator.cli import agent, chat, dataset, demo, images, jobs, prs, swarm, tasks


def build_app() -> typer.Typer:
    """The whole ``kswarm`` app, every noun registered."""
    app = typer.Typer(
        help="kswarm: a swarm of LLM agents that write, verify and review kernels.", no_args_is_help=True
    )
    swarm.register(app)
    agent.register(app)
    chat.register(app)
    prs.register(app)
    jobs.register(app)
    tasks.register(app)
    dataset.register(app)
    demo.register(app)
    images.register(app)
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
