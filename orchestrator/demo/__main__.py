"""``python -m orchestrator.demo [OPTIONS]``: the same as ``kswarm demo``."""

from __future__ import annotations

import typer

from orchestrator.cli.demo import register

app = typer.Typer(add_completion=False)
register(app)

if __name__ == "__main__":
    app()
