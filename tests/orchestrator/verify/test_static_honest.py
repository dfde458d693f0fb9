"""Honest kernels pass the static gate: the catalogue's solutions and a set of
standard patterns (masked tiles, multi-row programs, split-K atomics, online softmax, two-pass
reductions, row scans with carries, heuristics on integer arguments, grid lambdas, aliases)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.verify.static.gate import check_file

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
SOLUTIONS = sorted((ROOT / "gateway" / "tasks" / "catalogue" / "solutions").glob("*.py"))
HONEST = HERE / "cheats" / "static" / "honest"

# Entry of each honest pattern (the file's task), and whether it may use float32 tl.dot.
PATTERNS = {
    "masked_tiles_2d.py": "add",
    "multi_row_softmax.py": "softmax",
    "split_k_atomic_matmul.py": "matmul",
    "online_softmax.py": "softmax",
    "two_pass_sum.py": "total",
    "row_scan_carry.py": "cumsum_rows",
    "heuristics_and_grid_lambda.py": "add",
    "aliases_and_helpers.py": "add",
}
FP32 = ("float32", "float16")


def test_every_honest_pattern_is_listed() -> None:
    assert sorted(p.name for p in HONEST.glob("*.py")) == sorted(PATTERNS)
    assert len(SOLUTIONS) >= 8


@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_catalogue_solutions_pass(path: Path) -> None:
    report = check_file(path, path.stem, dtypes=FP32)
    assert report.ok, report.violations
    assert report.unverifiable == ()


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_honest_patterns_pass(name: str) -> None:
    report = check_file(HONEST / name, PATTERNS[name], dtypes=FP32)
    assert report.ok, report.violations
    assert report.unverifiable == ()
    assert report.kernels


@pytest.mark.parametrize("name", ["autotuned.py", "bf16_kernel.py"])
def test_honest_but_unverifiable_cheats_still_pass(name: str) -> None:
    report = check_file(HERE / "cheats" / name, "add", dtypes=FP32)
    assert report.ok, report.violations
