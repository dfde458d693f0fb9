"""A built dataset for the Dataset panel: rows of the build's own schema written by the build's own
writer (``gateway.dataset.build.write_dataset``) into the gateway's home, as ``kswarm dataset build``
leaves them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway.dataset.build import write_dataset
from gateway.dataset.schema import COLUMNS, SCHEMA_VERSION

REPO = "kswarm/dataset"


def row(
    record_id: str, task: str, author: str, verdict: str, accepted: bool, ts: float, **extra: Any
) -> dict[str, Any]:
    base: dict[str, Any] = {c.name: None for c in COLUMNS}
    lists = {"reviewers", "approvers", "reviews", "devices", "flags", "reasons", "trials", "timings"}
    base.update({name: [] for name in lists})
    base.update(
        record_id=record_id,
        schema_version=SCHEMA_VERSION,
        task=task,
        repo=REPO,
        commit=(record_id.encode().hex() * 4)[:40],
        kernel_path=f"kernels/{task}/{author}.py",
        author=author,
        submitter=author,
        reproduction=False,
        accepted=accepted,
        on_main=accepted,
        pool="cpu",
        kind="verify",
        state="succeeded" if verdict == "pass" else "failed",
        verdict=verdict,
        passed=verdict == "pass",
        needs_review=False,
        n_trials=3,
        n_trials_passed=3 if verdict == "pass" else 1,
        submitted_at=ts,
        finished_at=ts + 5,
        job_s=4.2,
    )
    base.update(extra)
    return base


def write_built_dataset(home: Path, rows: list[dict[str, Any]], cost: dict[str, Any] | None = None) -> Path:
    out = home / "dataset"
    write_dataset(rows, out, REPO, cost)
    return out
