"""Issue 22, principle 7: honest results the harness used to reject.

A tuple subclass (a ``namedtuple``, ``torch.return_types.*``) is a valid multi-output result: the
child unpacks it through tuple's own slots, so no method of the candidate's class runs after its
window closed (a list subclass with its own ``__iter__`` is still `not_a_tensor`: test_verify_tamper).
Before, a namedtuple result was `not_a_tensor` in every trial."""

from __future__ import annotations

from pathlib import Path

import pytest
from verifykit import summary, verify

pytestmark = pytest.mark.slow
HONEST = Path(__file__).resolve().parent / "honest"

ROW_MAX_MIN_TASK = """
import torch

ENTRY = "row_max_min"
DTYPES = ["float32"]
DIMS = ("rows", "cols")
CPU_SHAPES = [{"rows": 3, "cols": 5}, {"rows": 17, "cols": 33}, {"rows": 40, "cols": 100}]
SHAPES = [{"rows": 3, "cols": 5}, {"rows": 17, "cols": 33}, {"rows": 40, "cols": 100}]


def make_inputs(case, dtype, seed, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(case["rows"], case["cols"], generator=g).to(dtype).to(device),)


def reference(x):
    return torch.aminmax(x, dim=-1)[::-1]
"""


def test_a_namedtuple_result_is_a_valid_multi_output_result(tmp_path: Path) -> None:
    task = tmp_path / "row_max_min"
    task.mkdir()
    (task / "task.py").write_text(ROW_MAX_MIN_TASK)
    result = verify(task, HONEST / "row_max_min_namedtuple.py")
    assert result.verdict in ("pass",), summary(result)


def test_each_trial_records_the_tolerance_it_was_judged_by(tmp_path: Path) -> None:
    """The PR page shows a failing case's errors against its tolerance: the record carries the task's
    (here its own TOLERANCES, not the float32 default of 1e-4)."""
    task = tmp_path / "row_max_min"
    task.mkdir()
    tolerances = '\nTOLERANCES = {"float32": {"atol": 0.5, "rtol": 0.25}}\n'
    (task / "task.py").write_text(ROW_MAX_MIN_TASK + tolerances)
    result = verify(task, HONEST / "row_max_min_namedtuple.py")
    assert result.verdict == "pass", summary(result)
    assert result.trials and {(t.atol, t.rtol) for t in result.trials} == {(0.5, 0.25)}
