"""Principle 6: concurrency bugs are not hidden by the interpreter. Programs run in natural, reversed
and shuffled order; reads of another program's unsynchronised stores, conflicting stores and spins are
seen directly. Each bug passed before (the interpreter ran programs in order)."""

from __future__ import annotations

from pathlib import Path

import pytest
from verifykit import TaskFactory, summary, verify

from orchestrator.verify import Flag

pytestmark = pytest.mark.slow
# Small rows: the chained kernels run one program per 16 columns, each one slow in the interpreter.
SMALL = '\nCPU_SHAPES = [{"rows": 3, "cols": 33}, {"rows": 5, "cols": 50}, {"rows": 7, "cols": 130}]\n'


@pytest.mark.parametrize(
    ("task", "name", "words"),
    [
        ("cumsum_rows", "order_dependent_scan", "reads what program"),  # a chained carry, no sync
        ("sum_rows", "racy_accumulate", "store different values"),  # lost updates, no atomics
        ("cumsum_rows", "spin_wait", "waits on another program"),  # spins on its predecessor
    ],
)
def test_program_order_dependence(
    make_task: TaskFactory, cheats: Path, task: str, name: str, words: str
) -> None:
    task_dir = make_task(task, dtypes=["float32"], layouts={}, extra=SMALL)
    result = verify(task_dir, cheats / f"{name}.py", timeout_s=240)
    assert result.verdict == "fail", summary(result)
    assert Flag.PROGRAM_ORDER_DEPENDENT in result.flags and Flag.TIMEOUT not in result.flags
    details = " ".join(c.detail or "" for t in result.trials for c in t.calls)
    assert words in details, details[:1500]
