"""Shared paths and helpers of the verification harness tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.verify import VerificationResult
from orchestrator.verify import verify as harness_verify
from orchestrator.verify.forkserver import ForkServer

ROOT = Path(__file__).resolve().parents[3]
CATALOGUE_ROOT = ROOT / "gateway" / "tasks" / "catalogue"  # the one task catalogue (docs/tasks.md)
CATALOGUE = CATALOGUE_ROOT / "tasks"
SOLUTIONS = CATALOGUE_ROOT / "solutions"
CHEATS = Path(__file__).resolve().parent / "cheats"
HONEST = Path(__file__).resolve().parent / "honest"

TaskFactory = Callable[..., Path]


class SharedForkServer:
    """This test process's one fork server for the cpu pool, as a job that verifies several candidates
    shares one (``verify``'s ``server``): its zygote imports torch and Triton once per test worker, not
    once per call (about 2 s each). Every candidate still runs in a fresh fork of it; a zygote a child
    left unclean is replaced by the fork server itself. Closed at the end of the session (conftest)."""

    server: ForkServer | None = None

    @classmethod
    def get(cls) -> ForkServer:
        if cls.server is None:
            cls.server = ForkServer(interpret=True)
            cls.server.start()
        return cls.server

    @classmethod
    def close(cls) -> None:
        if cls.server is not None:
            cls.server.close()
            cls.server = None


def verify(
    task_dir: str | Path, candidate: str | Path, pool: str = "cpu", **options: Any
) -> VerificationResult:
    """``orchestrator.verify.verify`` on the test process's shared fork server for the cpu pool, unless the
    test passes a ``server`` of its own (``server=None``: one for this call alone, as every job has)."""
    if pool == "cpu" and "server" not in options:
        options["server"] = SharedForkServer.get()
    return harness_verify(task_dir, candidate, pool, **options)


class RecordingMonitor:
    """What the interpreter's instruments need of a monitor, for in-process tests (no child)."""

    def __init__(self) -> None:
        self.findings: dict[str, list[str]] = {}
        self.stalled = False

    def record(self, kind: str, detail: str) -> None:
        self.findings.setdefault(kind, []).append(detail)


def solution(task: str) -> Path:
    """The catalogue's honest reference solution of ``task``."""
    return SOLUTIONS / f"{task}.py"


def summary(result: VerificationResult) -> str:
    """What an assertion message needs: verdict, flags, reasons and the first failing trial."""
    bad = next((t for t in result.trials if not t.ok), None)
    first = f"; trial {bad.index} {bad.layout} {bad.flags}: {(bad.detail or '')[:300]}" if bad else ""
    return f"{result.verdict} {[str(f) for f in result.flags]} {result.reasons[:3]}{first}"


def probe_calls(task: Path, probe: Path, tmp_path: Path, tag: str, **options: Any) -> list[dict]:
    """Run a probe candidate (it appends one JSON line per call to the file it is given, with the
    static gate advisory) and return its observations, each tagged with its call's kind. ``options``
    go to ``verify`` (``server=None``: a zygote of its own, as a job of its own has)."""
    out = tmp_path / f"seen_{tag}.jsonl"
    candidate = tmp_path / f"probe_{tag}" / "probe.py"
    candidate.parent.mkdir()
    candidate.write_text(probe.read_text().replace("__OUT__", str(out)))
    result = verify(task, candidate, enforce_static=False, **options)
    assert result.child is not None and result.child.completed, summary(result)
    seen = [json.loads(line) for line in out.read_text().splitlines()]
    calls = [c for t in result.trials for c in t.calls]
    assert len(seen) == len(calls)
    for obs, call in zip(seen, calls, strict=True):
        obs["monitored"], obs["guarded"] = call.monitored, call.guarded
    return seen
