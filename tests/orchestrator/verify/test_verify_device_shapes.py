"""Issue 22 point 4: the task's own device shapes are verified on the cpu pool, by sampling programs.

The cheats in cheats/device_shapes/ are right on every CPU shape and wrong on the device shapes; each
passed, unflagged, on the harness before this change (see each file's header). Honest kernels, the
catalogue's solutions and multi-launch pipelines, still pass, with evidence "cpu-screened" where a
device shape could be judged.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from verifykit import CATALOGUE, CHEATS, HONEST, SOLUTIONS, summary, verify

from orchestrator.verify.device_shapes import (
    INVALID,
    READY,
    SPOILED,
    WRITTEN,
    device_trials,
    ends,
    sampled_output,
)
from orchestrator.verify.models import Flag
from orchestrator.verify.sampling import axis_indices, uses_atomics
from orchestrator.verify.tasks import load_task

DEVICE = CHEATS / "device_shapes"
SAMPLED = re.compile(r"^(\d+) of (\d+) programs in (\d+) launch\(es\)")


# --- unit: sampling and judging -------------------------------------------------------------------


def test_axis_samples_hold_both_ends_and_are_the_same_for_the_same_length() -> None:
    a = axis_indices(4097, 10, seed=7)
    assert a[0] == 0 and a[-1] == 4096 and len(a) == 10
    assert axis_indices(4097, 10, seed=7) == a  # a second launch over the same rows picks the same rows
    assert axis_indices(8, 3, seed=7) == list(range(8))  # a short axis runs whole
    # a grid-stride loop over 5000 rows on 4096 programs: program 903 owns the last row
    assert 903 in axis_indices(4096, 8, seed=7, sizes=[5000])


def test_atomics_are_found_in_the_kernel_and_in_what_it_calls() -> None:
    def plain() -> None:
        return None

    def accumulate(tl: object) -> None:
        tl.atomic_add  # type: ignore[attr-defined]  # noqa: B018

    assert uses_atomics(accumulate) and not uses_atomics(plain)


def test_a_sampled_output_is_judged_on_what_executed_programs_wrote() -> None:
    out = torch.zeros(3, 4)
    states = torch.full((3, 4), READY, dtype=torch.uint8)
    states[0] = WRITTEN
    states[2] = WRITTEN
    verdict = sampled_output(0, out, states)
    assert verdict.valid is not None and int(verdict.valid.sum()) == 8
    states[2, 3] = INVALID  # the last element: no program wrote it, the kernel does not cover it
    assert sampled_output(0, out, states).never_written
    states[2, 3] = SPOILED  # written from data the sample skipped: nothing to conclude
    verdict = sampled_output(0, out, states)
    assert verdict.valid is None and verdict.not_judged and not verdict.never_written
    assert ends((2, 3)) == [(0, 0), (1, 2)]


def test_one_device_shape_per_dtype_within_the_budget_drawn_from_the_seeds() -> None:
    task = load_task(CATALOGUE / "softmax")
    trials, skipped = device_trials(task, ["float32", "float16"], [1, 2, 3, 4, 5], start=30)
    assert [t.dtype for t in trials] == ["float32", "float16"] and skipped == []
    assert all(t.sampled and t.case in task.shapes and t.case["rows"] < 32768 for t in trials)
    assert [t.index for t in trials] == [30, 31]
    again, _ = device_trials(task, ["float32", "float16"], [1, 2, 3, 4, 5], start=30)
    assert [t.case for t in again] == [t.case for t in trials]  # --seeds replays the draw
    huge, why = device_trials(load_task(CATALOGUE / "embedding"), ["float32"], [1, 2, 3, 4, 5], 0)
    assert huge == [] and "budget" in why[0]


# --- adversarial: right on the CPU shapes, wrong on the device shapes ---------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("cheat", "task"),
    [
        ("truncated_block", DEVICE / "tasks" / "softmax_wide"),  # block covers CPU rows only
        ("short_rows", DEVICE / "tasks" / "softmax_tall"),  # grid covers 4096 rows
        ("short_grid", CATALOGUE / "add"),  # grid covers 4096 elements
        ("narrow_index", CATALOGUE / "sum_rows"),  # int16 offsets wrap past 32767
    ],
)
def test_a_kernel_wrong_only_on_device_shapes_fails(cheat: str, task: Path) -> None:
    result = verify(task, DEVICE / f"{cheat}.py")
    assert result.verdict == "fail", summary(result)
    assert Flag.DEVICE_SHAPES in result.flags, summary(result)
    assert result.evidence == "none"
    device = [t for t in result.trials if t.sampled]
    assert device and all(not t.ok and Flag.DEVICE_SHAPES in t.flags for t in device), summary(result)
    # every CPU-shape trial passed: only the device shapes show the bug
    assert all(t.ok for t in result.trials if not t.sampled), summary(result)


# --- honest kernels ----------------------------------------------------------------------------


# Every catalogue solution passes with its device shapes screened (or says why they could not be):
# tests/gateway/tasks/catalogue/test_catalogue_tasks.py, which runs each through the harness once.


@pytest.mark.slow
def test_a_two_launch_pipeline_is_followed_across_launches() -> None:
    # partials per (row, block of 256 columns), then one program per row: followable where a row has
    # at most 8 blocks (the short axis runs whole, the same rows are sampled in both launches)
    task = load_task(CATALOGUE / "sum_rows")
    seeds = next(
        s
        for base in range(1, 500)
        for s in [[base + i for i in range(5)]]
        if all(t.case["cols"] <= 2048 for t in device_trials(task, task.dtypes, s, 0)[0])
    )
    result = verify(CATALOGUE / "sum_rows", HONEST / "two_pass_sum.py", seeds=seeds)
    assert result.verdict == "pass" and result.evidence == "cpu-screened", summary(result)
    device = [t for t in result.trials if t.device_shape]
    assert device and all("in 2 launch(es)" in (t.sampled or "") for t in device)


@pytest.mark.slow
def test_split_k_with_atomics_passes_and_says_what_sampling_could_judge() -> None:
    result = verify(CATALOGUE / "matmul", HONEST / "splitk_atomic_matmul.py")
    assert result.verdict == "pass", summary(result)
    if result.evidence == "cpu-shapes-only":  # atomics of a large launch are partial when sampled
        assert any(r.startswith("pass (cpu shapes only)") and "not judged" in r for r in result.reasons)
    else:
        assert result.evidence == "cpu-screened"


@pytest.mark.slow
def test_the_sampled_trial_says_what_ran_and_stays_fast() -> None:
    result = verify(CATALOGUE / "softmax", SOLUTIONS / "softmax.py")
    assert result.verdict == "pass" and result.evidence == "cpu-screened", summary(result)
    for trial in (t for t in result.trials if t.sampled):
        match = SAMPLED.match(trial.sampled or "")
        assert match, trial.sampled
        ran, total, launches = (int(g) for g in match.groups())
        assert launches == 1 and 2 <= ran <= min(total, 64), trial.sampled
        assert "compared output 0" in (trial.sampled or "")
        assert len(trial.calls) == 1 and trial.calls[0].monitored
    # the sampled trials add seconds, not minutes (the interpreter runs ~1 ms per program here)
    assert result.durations.child_s < 60, result.durations
    assert np.isfinite(result.durations.total_s)
