"""``kswarm dataset build``: ``build`` on this module's ``app``, the ``dataset`` group of ``main``.

The gateway is found like every command's (``commands.connect``); the token must be an operator's (it
clones every branch and lists every job). The running swarm's spec (``$KSWARM_HOME/swarm/swarm.json``)
gives each agent's model and role and its ``dataset:`` rules (the rejected records' timelines).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Annotated

import typer

from gateway.client import find_gateway, kswarm_home
from gateway.dataset.rules import DatasetRules
from orchestrator.cli.commands import HomeOpt, command
from orchestrator.cli.output import console, fail, print_json
from orchestrator.spec import SwarmSpec, agent_models

BUILD_TIMEOUT_S = 120.0


def running_spec(home: Path) -> SwarmSpec | None:
    """The spec the swarm under ``home`` was started with, if one runs (or ran) there."""
    try:
        info = json.loads((home / "swarm" / "swarm.json").read_text())
        return SwarmSpec.model_validate(info.get("spec") or {})
    except (OSError, ValueError, TypeError):
        return None


def spec_rules_and_roles(home: Path) -> tuple[DatasetRules, dict[str, str]]:
    """The spec's ``dataset:`` rules and each agent's role (the red team's cost is counted as such)."""
    spec = running_spec(home)
    if spec is None:
        return DatasetRules(), {}
    return spec.dataset, {a.name: str(a.role) for a in spec.expand()}


app = typer.Typer(help="The kernel dataset: build it from the forge and the job records.")


@command(app, "build")
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
    """Write data/{records,accepted,rejected}.{jsonl,parquet}, summary.json and README.md (the card)."""
    # Here, not at the top: pyarrow and numpy cost every other kswarm command ~50 MB and 0.4 s.
    from gateway.dataset.build import build_dataset_at
    from gateway.dataset.sources import FileJobSource

    target = dataclasses.replace(find_gateway(home), timeout=BUILD_TIMEOUT_S)
    home_dir = kswarm_home(home)
    source = FileJobSource(jobs_file) if jobs_file else None
    rules, roles = spec_rules_and_roles(home_dir)
    try:
        report = build_dataset_at(
            target,
            repo,
            out or home_dir / "dataset",
            models=agent_models(home_dir),
            job_source=source,
            rules=rules,
            roles=roles,
        )
    except subprocess.CalledProcessError as exc:  # the git mirror: git says why
        fail(f"dataset build failed: git: {(exc.stderr or '').strip() or exc}")
    except (OSError, ValueError) as exc:
        fail(f"dataset build failed: {exc}")
    s = report.summary
    if as_json:
        print_json({"paths": {k: str(v) for k, v in vars(report.paths).items()}, **s}, indent=None)
        return
    statuses = s.get("statuses") or {}
    console.print(
        f"{s['records']} records, {s['accepted']} accepted, {statuses.get('withdrawn', 0)} withdrawn, "
        f"{statuses.get('rejected', 0)} rejected, {s['passed']} passed ({s['pass_rate']:.0%}) "
        f"over {s['tasks']} tasks"
    )
    for name, path in vars(report.paths).items():
        console.print(f"  {name:8} {path}")
