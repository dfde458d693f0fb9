"""``kswarm dataset build``: registered on the main CLI with ``register(app)``.

The gateway is found like every command's (``commands.connect``); the token must be an operator's (it
clones every branch and lists every job).
"""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path
from typing import Annotated

import typer

from gateway.client import find_gateway, kswarm_home
from orchestrator.cli.commands import HomeOpt, command
from orchestrator.cli.output import console, fail, print_json
from orchestrator.spec import agent_models

BUILD_TIMEOUT_S = 120.0


def register(app: typer.Typer) -> None:
    dataset_app = typer.Typer(help="The kernel dataset: build it from the forge and the job records.")
    app.add_typer(dataset_app, name="dataset")

    @command(dataset_app, "build")
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
        home: HomeOpt = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    ) -> None:
        """Write data/records.jsonl, data/records.parquet, summary.json and README.md (the card)."""
        # Here, not at the top: pyarrow and numpy cost every other kswarm command ~50 MB and 0.4 s.
        from gateway.dataset.build import build_dataset_at
        from gateway.dataset.sources import FileJobSource

        target = dataclasses.replace(find_gateway(home), timeout=BUILD_TIMEOUT_S)
        home_dir = kswarm_home(home)
        source = FileJobSource(jobs_file) if jobs_file else None
        try:
            report = build_dataset_at(
                target, repo, out or home_dir / "dataset", models=agent_models(home_dir), job_source=source
            )
        except subprocess.CalledProcessError as exc:  # the git mirror: git says why
            fail(f"dataset build failed: git: {(exc.stderr or '').strip() or exc}")
        except (OSError, ValueError) as exc:
            fail(f"dataset build failed: {exc}")
        s = report.summary
        if as_json:
            print_json({"paths": {k: str(v) for k, v in vars(report.paths).items()}, **s}, indent=None)
            return
        console.print(
            f"{s['records']} records, {s['accepted']} accepted, {s['passed']} passed "
            f"({s['pass_rate']:.0%}) over {s['tasks']} tasks"
        )
        for name, path in vars(report.paths).items():
            console.print(f"  {name:8} {path}")
