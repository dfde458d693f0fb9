"""Shared paths and helpers of the verification harness tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from orchestrator.verify import VerificationResult

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "orchestrator" / "verify" / "examples"
CATALOGUE = ROOT / "orchestrator" / "catalogue" / "tasks"
CHEATS = Path(__file__).resolve().parent / "cheats"
HONEST = Path(__file__).resolve().parent / "honest"

TaskFactory = Callable[..., Path]


def summary(result: VerificationResult) -> str:
    """What an assertion message needs: verdict, flags, reasons and the first failing trial."""
    bad = next((t for t in result.trials if not t.ok), None)
    first = f"; trial {bad.index} {bad.layout} {bad.flags}: {(bad.detail or '')[:300]}" if bad else ""
    return f"{result.verdict} {[str(f) for f in result.flags]} {result.reasons[:3]}{first}"
