"""The verification evidence shown beside a kernel file in a PR's diff: the latest job of each (kind,
pool) on that file at that head, bound the way the gate binds them (``gateway/forge/gate/coverage.py``:
same repo, the head's sha, the kernel's path), with its verdict, evidence level, flags, the number of
trials and the failing cases (shape, dtype, errors and the tolerance when the record carries one).
"""

from __future__ import annotations

from typing import Any

from gateway.ui.jobs_routes import flag_class, summarise

MAX_FAILING = 6  # failing cases listed beside a file; the job page has all of them


def case_text(shape: Any) -> str:
    """``n=4096 d=128`` for a case's shape mapping (the harness's ``TrialResult.shape``)."""
    if isinstance(shape, dict):
        return " ".join(f"{k}={v}" for k, v in shape.items())
    return str(shape)


def tolerance_text(trial: dict[str, Any]) -> str:
    atol, rtol = trial.get("atol"), trial.get("rtol")
    if atol is None and rtol is None:
        return ""
    return f"atol {atol} · rtol {rtol}"


def evidence_of(job: dict[str, Any]) -> dict[str, Any]:
    """One job as the box beside the file shows it (``summarise`` plus trial counts and failing cases)."""
    view = summarise(job)
    raw = job.get("result")
    trials = [t for t in (raw.get("trials") or []) if isinstance(t, dict)] if isinstance(raw, dict) else []
    failing = [t for t in trials if not t.get("ok")]
    view["trials_run"] = len(trials)
    view["trials_failed"] = len(failing)
    view["failing"] = [
        {
            "shape": case_text(t.get("shape")),
            "dtype": str(t.get("dtype") or ""),
            "max_abs_err": t.get("max_abs_err"),
            "max_rel_err": t.get("max_rel_err"),
            "tolerance": tolerance_text(t),
            "flags": [(str(f), flag_class(str(f))) for f in t.get("flags") or []],
        }
        for t in failing[:MAX_FAILING]
    ]
    view["failing_more"] = max(0, len(failing) - MAX_FAILING)
    return view


def evidence_by_path(jobs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per kernel path, the newest job of each (kind, pool) among ``jobs`` (all at one head of one repo),
    newest first."""
    newest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for job in jobs:
        key = (str(job.get("kernel") or ""), str(job.get("kind") or ""), str(job.get("pool") or ""))
        if key[0] and (key not in newest or _submitted(job) > _submitted(newest[key])):
            newest[key] = job
    out: dict[str, list[dict[str, Any]]] = {}
    for job in sorted(newest.values(), key=_submitted, reverse=True):
        out.setdefault(str(job["kernel"]), []).append(evidence_of(job))
    return out


def _submitted(job: dict[str, Any]) -> float:
    return float(job.get("submitted") or 0)
