"""``kswarm dataset build``: registered on the main CLI with ``register(app)``.

The gateway is found like every other command (``KSWARM_URL`` + ``KSWARM_TOKEN``, else
``$KSWARM_HOME/gateway.json`` and ``operator.token``); the token must be an operator's (it clones every
branch and lists every job).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import httpx
import typer
from rich.console import Console

from gateway.client.home import ConnectError, connection, kswarm_home
from gateway.dataset.build import build_dataset
from gateway.dataset.sources import FileJobSource, agent_models

console = Console()
err_console = Console(stderr=True)


def register(app: typer.Typer) -> None:
    dataset_app = typer.Typer(help="The kernel dataset: build it from the forge and the job records.")
    app.add_typer(dataset_app, name="dataset")

    @dataset_app.command("build")
    def build(
        repo: Annotated[
            str, typer.Option("--repo", "-r", help="org/name of the dataset repo.")
        ] = "kswarm/dataset",
        out: Annotated[
            Path | None, typer.Option("--out", "-o", help="Output dir (default $KSWARM_HOME/dataset).")
        ] = None,
        jobs_file: Annotated[
            Path | None, typer.Option("--jobs-file", help="Job records as JSON Lines instead of /api/jobs.")
        ] = None,
        home: Annotated[Path | None, typer.Option("--home", help="Data dir (default $KSWARM_HOME).")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    ) -> None:
        """Write data/records.jsonl, data/records.parquet, summary.json and README.md (the card)."""
        try:
            conn = connection(home)
        except ConnectError as exc:
            err_console.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(1) from exc
        target = out or kswarm_home(home) / "dataset"
        source = FileJobSource(jobs_file) if jobs_file else None
        try:
            report = build_dataset(
                conn.url, conn.token, repo, target, models=agent_models(kswarm_home(home)), job_source=source
            )
        except (httpx.HTTPError, OSError, ValueError) as exc:
            err_console.print(f"[red]error:[/red] dataset build failed: {exc}")
            raise typer.Exit(1) from exc
        s = report.summary
        if as_json:
            typer.echo(json.dumps({"paths": {k: str(v) for k, v in vars(report.paths).items()}, **s}))
            return
        console.print(
            f"{s['records']} records, {s['accepted']} accepted, {s['passed']} passed "
            f"({s['pass_rate']:.0%}) over {s['tasks']} tasks"
        )
        for name, path in vars(report.paths).items():
            console.print(f"  {name:8} {path}")
