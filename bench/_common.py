"""Shared helpers for the benchmarks: percentiles and the test-support import path."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tree itself first: tests/ mirrors its folders (tests/orchestrator, ...)
sys.path.append(str(ROOT / "tests"))  # kstest: the same real gateway/Redis helpers the tests use


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation."""
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[min(98, max(0, int(q) - 1))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"
