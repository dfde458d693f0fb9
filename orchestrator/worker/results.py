"""The harness command of a job, and what an attempt's end means for the job.

The harness (``python -m orchestrator.verify``, docs/verification.md) writes its result record to
``--out`` and exits 0 pass, 1 fail, 2 error, 3 unverifiable. The worker trusts the record only when the
exit code agrees with its verdict and the record names the candidate file that was checked out; anything
else (no record, a crash, a disagreement) is an ``error``, never a pass.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.client.jobs.models import VERDICT_STATES, Job, JobState
from gateway.client.jobs.pools import PoolConfig
from orchestrator.worker.executors.base import ExecOutcome

EXIT_CODES = {"pass": 0, "fail": 1, "error": 2, "unverifiable": 3}
PROJECT_ROOT = Path(__file__).resolve().parents[2]


COUNTEREXAMPLE_DIR = "counterexample"  # in the job's out dir: what a counterexample job judges


def write_counterexample(job: Job, out: Path) -> Path | None:
    """A counterexample job's input (``input.json``) or generator (``generator.py``), written into
    ``out/counterexample/`` read-only, for the harness to read before any candidate code runs; None
    for other jobs."""
    payload = job.counterexample
    if job.kind != "counterexample" or payload is None:
        return None
    folder = out / COUNTEREXAMPLE_DIR
    folder.mkdir(mode=0o755)
    if payload.input is not None:
        path, text = folder / "input.json", payload.input.model_dump_json(indent=2) + "\n"
    else:
        path, text = folder / "generator.py", payload.generator or ""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    folder.chmod(0o555)
    return path


def counterexample_flags(path: Path | None) -> list[str]:
    """The harness's flags for a counterexample file (``write_counterexample``)."""
    if path is None:
        return []
    flag = "--counterexample-input" if path.suffix == ".json" else "--counterexample-generator"
    return [flag, str(path)]


def harness_argv(
    pool: PoolConfig,
    job: Job,
    task_dir: Path,
    candidate: Path,
    out: Path,
    python: str | None = None,
    counterexample: Path | None = None,
) -> list[str]:
    """The real harness, or the pool's ``harness_command`` template (tests' stand-in); a counterexample
    job's file (``write_counterexample``) goes to either as its flag."""
    python = python or sys.executable
    if pool.harness_command:
        fields = {
            "python": python,
            "task_dir": str(task_dir),
            "candidate": str(candidate),
            "pool": pool.harness_pool_name(),
            "out": str(out),
            "timeout": str(child_timeout(job)),
            "kind": job.kind,
            "project": str(PROJECT_ROOT),
        }
        return [part.format(**fields) for part in pool.harness_command] + counterexample_flags(counterexample)
    return [*_harness(python), *harness_args(pool, job, task_dir, candidate, out, counterexample)]


def harness_args(
    pool: PoolConfig, job: Job, task_dir: Path, candidate: Path, out: Path, counterexample: Path | None = None
) -> list[str]:
    """The real harness's options for one job (what a warm start reads on its stdin)."""
    argv = ["--task", str(task_dir), "--candidate", str(candidate), "--pool", pool.harness_pool_name()]
    argv += ["--out", str(out), "--timeout", str(child_timeout(job))]
    if job.kind in ("verify", "counterexample"):
        argv.append("--no-timing")
    return argv + counterexample_flags(counterexample)


def warm_argv(pool: PoolConfig, python: str | None = None) -> list[str]:
    """The real harness started before its job (``--warm``): it reads ``harness_args`` from stdin."""
    return [*_harness(python or sys.executable), "--warm", "--pool", pool.harness_pool_name()]


def _harness(python: str) -> list[str]:
    # -P: the working directory never shadows the harness's own modules.
    return [python, "-P", "-s", "-m", "orchestrator.verify"]


def child_timeout(job: Job) -> int:
    """The harness's own share of the job's time; the rest is start-up, static gate and reference."""
    return max(5, int(job.timeout_s * 0.8))


@dataclass
class Verdict:
    state: JobState
    verdict: str | None
    error: str | None
    result: dict[str, Any] | None
    exit_code: int | None


def read_plain_file(path: Path, limit: int = 64 << 20) -> str:
    """The text of ``path`` only if it is a regular file, opened without following a link: the job
    wrote it, and the worker reads it with the worker's rights."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ValueError("too large")
    return data.decode()


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def interpret(
    outcome: ExecOutcome, result_path: Path, candidate_sha256: str | None, timeout_s: float
) -> Verdict:
    code = outcome.returncode
    if outcome.cancelled:
        return Verdict(JobState.cancelled, None, "cancelled while running", None, None)
    if outcome.timed_out:
        return Verdict(
            JobState.timeout, "error", f"ran past its {timeout_s:.0f} s limit and was killed", None, None
        )
    if outcome.error:
        return Verdict(JobState.error, "error", outcome.error, None, code)
    try:
        result = json.loads(read_plain_file(result_path))
        if not isinstance(result, dict):
            raise ValueError("not an object")
    except (OSError, ValueError) as exc:
        why = f"harness exited {code} without a readable result record ({type(exc).__name__})"
        tail = _last_line(outcome.output)
        return Verdict(JobState.error, "error", f"{why}: {tail}" if tail else why, None, code)
    verdict = result.get("verdict")
    if verdict not in EXIT_CODES:
        return Verdict(
            JobState.error, "error", f"result record has no valid verdict ({verdict!r})", None, code
        )
    if code != EXIT_CODES[verdict]:
        return Verdict(
            JobState.error,
            "error",
            f"harness exit code {code} disagrees with verdict {verdict!r}: record not trusted",
            result,
            code,
        )
    recorded = result.get("candidate_sha256")
    if candidate_sha256 and recorded and recorded != candidate_sha256:
        return Verdict(JobState.error, "error", "result record is for another candidate file", result, code)
    state = VERDICT_STATES[verdict]
    reasons = result.get("reasons") or []
    if verdict == "unverifiable":
        reasons = reasons or result.get("unverifiable_reasons") or []
    error = None if verdict == "pass" else ("; ".join(str(r) for r in reasons)[:2000] or verdict)
    return Verdict(state, verdict, error, result, code)
