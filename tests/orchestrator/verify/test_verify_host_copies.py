"""Issue 22, principle 3, runtime part: host-side copies of inputs are judged by what they do, not by
how the source spells them. An aten op issued from the candidate's frames that copies data out of an
input's storage (the clone of `.contiguous()`/`.reshape()`, `copy_`, `_to_copy`, `*_copy`) is
`torch_compute` ("a host-side copy of input N's data"), unless the task sets `ALLOW_INPUT_COPIES`.

`copy_input_helper` (a helper's `t.contiguous()` on a strided input) passed, unflagged, before this
change: the monitor gave the clone a guarded buffer like any allocation. `copy_input_into`
(`empty` + `copy_` behind a helper) was already `torch_compute`, but named only `aten.copy_.default`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from verifykit import TaskFactory, summary, verify

from orchestrator.verify import Flag, harness

pytestmark = pytest.mark.slow

DETAIL = "a host-side copy of input 0's data"


def _details(result: object) -> str:
    return " ".join(c.detail or "" for t in result.trials for c in t.calls)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("name", "static"), [("copy_input_helper.py", True), ("copy_input_into.py", False)])
def test_a_copy_of_a_strided_input_is_torch_compute_however_spelled(
    make_task: TaskFactory, cheats: Path, name: str, static: bool
) -> None:
    task = make_task("add", dtypes=["float32"], layouts={0: ["strided"], 1: ["dense"]})
    result = verify(task, cheats / name, enforce_static=static)
    assert result.verdict == "fail" and Flag.TORCH_COMPUTE in result.flags, summary(result)
    assert DETAIL in _details(result), _details(result)[:2000]


def test_contiguous_on_a_dense_input_is_no_copy(make_task: TaskFactory, cheats: Path) -> None:
    task = make_task("add", dtypes=["float32"], layouts={0: ["dense"], 1: ["dense"]})
    result = verify(task, cheats / "copy_input_helper.py")
    assert result.verdict == "pass", summary(result)


# The parent hands the task's ALLOW_INPUT_COPIES to the child in the plan (harness.py builds it).
_PLANNED = "allow_input_copies" in Path(harness.__file__).read_text(encoding="utf-8")


@pytest.mark.skipif(not _PLANNED, reason="harness.py does not pass ALLOW_INPUT_COPIES into the plan yet")
def test_a_task_may_allow_input_copies(make_task: TaskFactory, cheats: Path) -> None:
    task = make_task(
        "add",
        dtypes=["float32"],
        layouts={0: ["strided"], 1: ["dense"]},
        extra="\nALLOW_INPUT_COPIES = True\n",
    )
    result = verify(task, cheats / "copy_input_helper.py")
    assert result.verdict == "pass", summary(result)
