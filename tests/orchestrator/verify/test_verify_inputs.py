"""Principle 5: inputs are what the task declares (strided, transposed, padded, offset, broadcast),
passed exactly as built and checked whole (padding included); results must be fresh and right when
the same input objects come back, and after they are refilled in place. Each cheat passed before."""

from __future__ import annotations

from pathlib import Path

import pytest
from verifykit import TaskFactory, summary, verify

from orchestrator.verify import Flag

pytestmark = pytest.mark.slow


def test_a_kernel_ignoring_strides_fails_on_declared_layouts(add_task: Path, cheats: Path) -> None:
    result = verify(add_task, cheats / "ignores_strides.py")
    assert result.verdict == "fail", summary(result)
    assert {Flag.MISMATCH, Flag.OUT_OF_BOUNDS_READ} <= set(result.flags)
    failing = {tuple(sorted(t.layout.items())) for t in result.trials if not t.ok}
    passing = {tuple(sorted(t.layout.items())) for t in result.trials if t.ok}
    assert all(dict(k) == {"0": "dense", "1": "dense"} for k in passing)  # only dense inputs pass
    assert any("broadcast" in dict(k).values() for k in failing)  # a stride-0 input stays stride 0


def test_broadcast_inputs_are_not_densified(make_task: TaskFactory, cheats: Path) -> None:
    task = make_task("add", dtypes=["float32"], layouts={1: ["broadcast"]})
    result = verify(task, cheats / "ignores_strides.py")
    assert result.verdict == "fail" and Flag.OUT_OF_BOUNDS_READ in result.flags, summary(result)


def test_an_object_keyed_cache_answers_stale_after_a_refill(make_task: TaskFactory, cheats: Path) -> None:
    result = verify(
        make_task("add", dtypes=["float32"], layouts={}), cheats / "object_cache.py", enforce_static=False
    )
    assert result.verdict == "fail" and Flag.STALE_OUTPUT in result.flags, summary(result)
    refills = [c for t in result.trials for c in t.calls if c.kind == "refill"]
    assert refills and not any(c.ok for c in refills)
    # The cache keys on object ids, which a later trial's tensors may reuse: such a trial's first call
    # already answers another trial's inputs (a mismatch throughout). A trial whose first call filled
    # the cache with its own answer gets it back for the same values, and stale after the refill.
    own = [t for t in result.trials if t.calls and t.calls[0].kind == "first" and t.calls[0].ok]
    assert own, summary(result)
    for trial in own:
        assert all(c.ok for c in trial.calls if c.kind == "repeat"), summary(result)
        assert all(Flag.STALE_OUTPUT in c.flags for c in trial.calls if c.kind == "refill"), summary(result)


def test_input_padding_is_part_of_the_input(make_task: TaskFactory, cheats: Path) -> None:
    task = make_task("sum_rows", dtypes=["float32"], layouts={0: ["padded"]})
    result = verify(task, cheats / "scratch_in_padding.py")
    assert result.verdict == "fail", summary(result)
    assert Flag.OUT_OF_BOUNDS_WRITE in result.flags  # the store into the padding was refused
    dense = verify(
        make_task("sum_rows", dtypes=["float32"], layouts={0: ["dense"]}), cheats / "scratch_in_padding.py"
    )
    assert dense.verdict == "fail" and Flag.INPUTS_MUTATED in dense.flags, summary(dense)
