"""Each record's ``status`` and the splits written from it (issue 27, points 4 and 5).

- ``accepted``: passed and is the merged head of a PR into main (``accepted`` before this step), and no
  withdrawal names its kernel at that commit;
- ``withdrawn``: was accepted, and a confirmed counterexample (a regression case of its task) broke it:
  ``accepted`` becomes false, ``withdrawal`` holds the reason, the counterexample, its finder, the job;
- ``rejected``: failed the gate (verdict ``fail``, ``error`` or ``unverifiable``), with its
  ``family``, its ``failing_cases`` and, unless the swarm opted out, its author's ``timeline`` excerpt;
- ``other``: everything else (passed but not merged, superseded, and the jobs that are the red team's and
  the heal's evidence: a counterexample's confirming job, a withdrawal's re-verification).

``data/records.*`` keep every row; ``data/accepted.*`` and ``data/rejected.*`` are the two splits."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from gateway.dataset.families import family_of
from gateway.dataset.loop_sources import CounterexampleRecord, TimelineSource
from gateway.dataset.rules import DatasetRules
from gateway.dataset.schema import SCHEMA
from gateway.dataset.sources import JobRecord
from gateway.dataset.withdrawals import Withdrawal

REJECTED_VERDICTS = ("fail", "error", "unverifiable")
SPLITS = ("accepted", "rejected")  # written besides records (the whole table)


def failing_cases(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The trials of a harness record that failed: their case, dtype, seed, layout, flags, why."""
    out = []
    for t in result.get("trials") or []:
        if not isinstance(t, dict) or t.get("ok"):
            continue
        flags = [str(f) for f in t.get("flags") or []]
        regression = t.get("regression")
        out.append(
            {
                "index": t.get("index"),
                "case": json.dumps(t.get("shape") or {}, sort_keys=True),
                "dtype": t.get("dtype"),
                "seed": t.get("seed"),
                "layout": json.dumps(t.get("layout") or {}, sort_keys=True),
                "flags": flags,
                "error": str(t.get("detail") or ", ".join(flags) or "failed"),
                "max_abs_err": t.get("max_abs_err"),
                "regression": str(regression) if regression else None,
            }
        )
    return out


def withdrawal_index(withdrawals: Iterable[Withdrawal]) -> dict[tuple[str, str], Withdrawal]:
    """(kernel path, commit) -> its withdrawal (the first recorded wins, as in the store)."""
    index: dict[tuple[str, str], Withdrawal] = {}
    for w in sorted(withdrawals, key=lambda w: w.at):
        index.setdefault((w.kernel.strip("/"), w.sha), w)
    return index


def classify(
    rows: list[dict[str, Any]],
    jobs: Mapping[str, JobRecord],
    withdrawals: Iterable[Withdrawal],
    counterexamples: Iterable[CounterexampleRecord] | None,
) -> None:
    """Set ``status``, ``withdrawal``, ``family`` and ``failing_cases`` of every row (in place)."""
    withdrawn = withdrawal_index(withdrawals)
    cx_list = list(counterexamples or [])
    finders = {c.id: c.finder for c in cx_list}
    loop_jobs = {c.job for c in cx_list if c.job} | {w.job for w in withdrawn.values()}
    loop_jobs |= {j.id for j in jobs.values() if j.kind == "counterexample" or j.reverify}
    for row in rows:
        row.update(status="other", withdrawal=None, family=None, failing_cases=[])
        row.setdefault("timeline", None)
        row.setdefault("timeline_truncated", False)
        if row["record_id"] in loop_jobs:
            # The red team's confirming jobs and the heal's re-verifications judge a kernel that was
            # accepted by its own verification: they are never an acceptance (nor a rejection) of their own.
            row["accepted"] = False
            continue
        if row["accepted"]:
            w = withdrawn.get((row["kernel_path"], row["commit"])) or withdrawn.get(
                (row["kernel_path"], row["merge_commit"] or "")
            )
            if w is None:
                row["status"] = "accepted"
                continue
            row["accepted"] = False
            row["status"] = "withdrawn"
            row["withdrawal"] = {
                "reason": w.reason,
                "counterexample": w.counterexample,
                "finder": finders.get(w.counterexample),
                "job": w.job,
                "at": w.at,
            }
        elif row["record_id"] not in loop_jobs and row["verdict"] in REJECTED_VERDICTS:
            job = jobs.get(row["record_id"])
            result = (job.result if job else None) or {}
            row["status"] = "rejected"
            row["family"] = family_of(
                row["verdict"], row["flags"], len(result.get("static_violations") or [])
            )
            row["failing_cases"] = failing_cases(result)


def bounded_excerpt(entries: list[dict[str, Any]], max_bytes: int) -> tuple[list[dict[str, Any]], bool]:
    """The newest entries (oldest first) whose JSON fits in ``max_bytes``; True when some were dropped.
    An entry's ``data`` is kept as a JSON string (one column type for every task and tool)."""
    kept: list[dict[str, Any]] = []
    used = 0
    for entry in reversed(entries):
        shaped = {
            "kind": str(entry.get("kind")),
            "ts": float(entry.get("ts") or 0.0),
            "summary": str(entry.get("summary") or ""),
            "data": json.dumps(entry.get("data") or {}, sort_keys=True, default=str),
        }
        size = len(json.dumps(shaped).encode())
        if used + size > max_bytes:
            return kept[::-1], True
        kept.append(shaped)
        used += size
    return kept[::-1], False


def attempt_windows(rows: list[dict[str, Any]], lookback_s: float) -> Iterator[tuple[dict[str, Any], float]]:
    """Each row with an author, oldest first, and where its window starts: the author's previous attempt
    at the row's task (the first: ``lookback_s`` before its submission). Cost and timelines use it."""
    last: dict[tuple[str, str], float] = {}
    for row in sorted(rows, key=lambda r: (r["submitted_at"] or 0.0, r["record_id"])):
        if not row["author"] or not row["submitted_at"]:
            continue
        key = (row["task"], row["author"])
        since = last.get(key, row["submitted_at"] - lookback_s)
        last[key] = row["submitted_at"]
        yield row, since


def add_timelines(
    rows: list[dict[str, Any]], timelines: TimelineSource | None, rules: DatasetRules, lookback_s: float
) -> None:
    """The rejected rows' timeline excerpts: the author's entries from its previous attempt at the task
    (the first: ``lookback_s`` before) to this submission. Nothing when the swarm opted out."""
    if timelines is None or not rules.rejected_timelines:
        return
    for row, since in attempt_windows(rows, lookback_s):
        if row["status"] != "rejected":
            continue
        found = timelines.entries(row["author"], since, row["submitted_at"])
        if found is None:
            return  # no monitor: no timelines anywhere
        row["timeline"], row["timeline_truncated"] = bounded_excerpt(found, rules.timeline_excerpt_bytes)


def write_table(rows: list[dict[str, Any]], jsonl: Path, parquet: Path) -> None:
    """One table as JSON Lines and Parquet (the dataset's one schema), each replaced whole."""
    tmp = jsonl.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    tmp.replace(jsonl)
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), parquet.with_suffix(".parquet.tmp"))
    parquet.with_suffix(".parquet.tmp").replace(parquet)


def write_splits(rows: list[dict[str, Any]], data: Path) -> dict[str, tuple[Path, Path]]:
    """``data/<split>.{jsonl,parquet}`` for each split: the rows of that status."""
    out = {}
    for split in SPLITS:
        paths = (data / f"{split}.jsonl", data / f"{split}.parquet")
        write_table([r for r in rows if r["status"] == split], *paths)
        out[split] = paths
    return out
