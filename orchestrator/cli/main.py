"""The ``kswarm`` command line, ``kswarm <noun> <verb>``: this module only assembles the noun modules.

Each noun is one module of ``orchestrator.cli``: a group's module-level ``app`` (a ``typer.Typer`` whose
commands are module-level functions) added here under the noun's name, and the top-level verbs
(``kswarm up``, ``kswarm ps``, ...), plain module-level functions named here. Everything they share is
in ``commands`` (the gateway client, the one error handler, the common options) and ``output``.
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
from orchestrator.cli.commands import command, root_options

# Plain click help (rich_markup_mode=None): a flag is shown as a flag, not as `--json <bool>`.
app = typer.Typer(
    help="kswarm: a swarm of LLM agents that write, verify and review kernels.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.callback()(root_options)

# The top-level verbs, each behind the one error handler (``commands.command``), in the order of --help.
command(app, "init")(swarm.init)
command(app, "validate")(swarm.validate)
command(app, "schema")(swarm.schema)
command(app, "up")(swarm.up)
command(app, "down")(swarm.down)
command(app, "ps")(swarm.ps)
command(app, "logs")(logs.logs)
command(app, "attention")(attention.attention)
command(app, "prs")(prs.prs)
command(app, "jobs")(jobs.jobs)
command(app, "cost")(cost.cost)
command(app, "demo")(demo.demo)
command(app, "ui")(ui.ui)
command(app, "workers")(worker.workers)
# The nouns with verbs of their own: each module's ``app``.
app.add_typer(agent.app, name="agent")
app.add_typer(chat.app, name="chat")
app.add_typer(prs.app, name="pr")
app.add_typer(jobs.app, name="job")
app.add_typer(tasks.app, name="tasks")
app.add_typer(dataset.app, name="dataset")
app.add_typer(images.app, name="images")
app.add_typer(worker.app, name="worker")


def main() -> None:
    """Entry point of the ``kswarm`` script."""
    if os.environ.get("KSWARM_DEBUG"):
        app()
        return
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
