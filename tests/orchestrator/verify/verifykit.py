"""Shared paths and helpers of the verification harness tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from orchestrator.verify import VerificationResult

ROOT = Path(__file__).resolve().parents[3]
CATALOGUE_ROOT = ROOT / "gateway" / "tasks" / "catalogue"  # the one task catalogue (docs/tasks.md)
CATALOGUE = CATALOGUE_ROOT / "tasks"
SOLUTIONS = CATALOGUE_ROOT / "solutions"
CHEATS = Path(__file__).resolve().parent / "cheats"
HONEST = Path(__file__).resolve().parent / "honest"

TaskFactory = Callable[..., Path]


def solution(task: str) -> Path:
    """The catalogue's honest reference solution of ``task``."""
    return SOLUTIONS / f"{task}.py"


def summary(result: VerificationResult) -> str:
    """What an assertion message needs: verdict, flags, reasons and the first failing trial."""
    bad = next((t for t in result.trials if not t.ok), None)
    first = f"; trial {bad.index} {bad.layout} {bad.flags}: {(bad.detail or '')[:300]}" if bad else ""
    return f"{result.verdict} {[str(f) for f in result.flags]} {result.reasons[:3]}{first}"
