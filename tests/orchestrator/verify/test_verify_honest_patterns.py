"""Principle 7: honest kernels still pass every new check: the standard patterns below (masked tiles,
multi-row programs, split-K with atomics, online softmax, two-pass reductions, row scans with carries,
grid lambdas and heuristics, and programs that talk through atomics: a "last block" ticket, a spin
lock, relaxed accumulation), on the catalogue tasks with their declared layouts. The catalogue's own
solutions are run in tests/gateway/tasks/catalogue and test_verify_runtime_honest.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from verifykit import CATALOGUE, summary, verify

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("task", "name"),
    [
        ("softmax", "multi_row_softmax"),
        ("softmax", "online_softmax"),
        ("matmul", "splitk_atomic_matmul"),
        ("sum_rows", "two_pass_sum"),
        ("cumsum_rows", "row_scan_carry"),
        ("add", "grid_lambda_heuristics"),
        ("sum_rows", "last_block_sum"),
        ("sum_rows", "locked_accumulate"),
        ("sum_rows", "relaxed_atomic_sum"),
    ],
)
def test_honest_pattern_passes(honest: Path, task: str, name: str) -> None:
    result = verify(CATALOGUE / task, honest / f"{name}.py")
    assert result.static_violations == [], result.static_violations
    assert result.verdict == "pass", summary(result)
    assert len({tuple(sorted(t.layout.items())) for t in result.trials}) > 1
