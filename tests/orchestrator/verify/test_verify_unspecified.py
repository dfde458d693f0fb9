"""Issue 22, principles 2 and 5: the interpreter behaves like the weakest device Triton allows.

Hints are assertions (false_hint), a scan/reduce combine runs in a device's association order
(non_associative_combine), argmax/argmin with tie_break_left=False return any tied index
(tie_dependent), and inputs are read-only while the call runs (input_written). Every cheat below passed
the harness before this (its header says what the old harness answered); each honest counterpart
passes. The unit tests at the end drive the semantics in-process on the interpreter, without a child.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from verifykit import RecordingMonitor, TaskFactory, summary, verify

from orchestrator.verify import Flag

UNSPECIFIED = Path(__file__).resolve().parent / "cheats" / "unspecified"
TASKS = Path(__file__).resolve().parent / "unspecified_tasks"
# argmax_rows on small integers: most rows have several equal maxima (the reference takes the first).
TIES = """

def make_inputs(case, dtype, seed, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 4, (case["rows"], case["cols"]), generator=g).to(dtype)
    return (x.to(device),)
"""


def _task(make_task: TaskFactory, name: str) -> Path:
    if name == "ema_rows":
        return TASKS / "ema_rows"
    if name == "ties":
        return make_task("argmax_rows", dtypes=["float32"], extra=TIES)
    return make_task(name, dtypes=["float32"])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("task", "name", "flag"),
    [
        ("add", "false_multiple_of", Flag.FALSE_HINT),  # tl.multiple_of(n, 16) for lengths 1000, 3001, 37
        ("add", "aligned_pointers", Flag.FALSE_HINT),  # tl.multiple_of(ptr, 16) on offset views
        ("embedding", "contiguous_gather", Flag.FALSE_HINT),  # tl.max_contiguous on gathered ids
        ("mean_rows", "welford_mean", Flag.NON_ASSOCIATIVE_COMBINE),  # a merge right only left to right
        ("ema_rows", "ema_left_fold", Flag.NON_ASSOCIATIVE_COMBINE),  # scan combine 0.9 * acc + x
        ("ties", "argmax_fast_ties", Flag.TIE_DEPENDENT),  # tie_break_left=False, first index wanted
        ("softmax", "input_as_scratch", Flag.INPUT_WRITTEN),  # input row as scratch, restored after
    ],
)
def test_unspecified_behaviour_cheat_is_rejected(
    make_task: TaskFactory, task: str, name: str, flag: Flag
) -> None:
    result = verify(_task(make_task, task), UNSPECIFIED / f"{name}.py", timeout_s=300)
    assert result.verdict == "fail", summary(result)
    assert flag in result.flags, summary(result)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("task", "name"),
    [
        ("add", "true_hints_add"),  # multiple_of/max_contiguous on pid * BLOCK + arange, assume(pid >= 0)
        ("mean_rows", "welford_merge_mean"),  # count-weighted merge: associative
        ("ema_rows", "ema_scan_pairs"),  # affine composition: a scan with carries
        ("ties", "argmax_left_ties"),  # tie_break_left=True
        ("ties", "argmax_index_combine"),  # its own (value, index) combine, first index on ties
        ("softmax", "reduce_online_softmax"),  # the two-tuple online-softmax merge in tl.reduce
    ],
)
def test_honest_counterpart_passes(make_task: TaskFactory, honest: Path, task: str, name: str) -> None:
    result = verify(_task(make_task, task), honest / f"{name}.py", timeout_s=300)
    unspecified = {Flag.FALSE_HINT, Flag.NON_ASSOCIATIVE_COMBINE, Flag.TIE_DEPENDENT, Flag.INPUT_WRITTEN}
    assert not unspecified & set(result.flags), summary(result)
    assert all(t.ok for t in result.trials), summary(result)


# --- in-process: the semantics on the interpreter, no child -------------------------------------------
@pytest.fixture(scope="module")
def kernels() -> Any:
    """The probe kernels, decorated in interpreter mode (the environment is restored after)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "1")
        mp.syspath_prepend(str(Path(__file__).resolve().parent / "probes"))
        return importlib.import_module("unspecified_kernels")


def _launch(
    kernel: Any, grid: tuple[int, ...], *args: Any, inputs: list[Any] | None = None, **kw: Any
) -> dict[str, list[str]]:
    from orchestrator.verify.interp import InterpreterInstruments

    monitor = RecordingMonitor()
    instruments = InterpreterInstruments(monitor, 7)  # type: ignore[arg-type]
    instruments.inputs = list(inputs or [])
    instruments.install()
    try:
        kernel[grid](*args, **kw)
    finally:
        instruments.uninstall()
    return monitor.findings


def test_a_non_associative_combine_is_named_and_answered_in_device_order(kernels: Any) -> None:
    x, out = torch.randn(64), torch.empty(1)
    findings = _launch(kernels.reduce_kernel, (1,), x, out, B=64, MODE=0)
    assert "avg" in " ".join(findings.get("non_associative", [])), findings
    left_fold = x[0].item()
    for v in x[1:].tolist():
        left_fold = (left_fold + v) * 0.5
    assert abs(out.item() - left_fold) > 1e-3  # a device's order, not the interpreter's


def test_honest_float_sums_and_int_scans_are_not_flagged(kernels: Any) -> None:
    x, out = torch.randn(1024) * 1e3, torch.empty(1)
    assert _launch(kernels.reduce_kernel, (1,), x, out, B=1024, MODE=1) == {}
    assert abs(out.item() - x.double().sum().item()) < 1e-1
    ints = torch.randint(0, 1 << 20, (256,)).float()
    assert _launch(kernels.reduce_kernel, (1,), ints, out, B=256, MODE=2) == {}


@pytest.mark.parametrize(("mode", "false"), [(0, True), (1, False), (2, True), (3, False)])
def test_hints_are_checked_on_the_data(kernels: Any, mode: int, false: bool) -> None:
    findings = _launch(kernels.hint_kernel, (3,), torch.zeros(100), 100, B=64, MODE=mode)
    assert ("false_hint" in findings) == false, findings


def test_a_restored_input_write_is_still_an_input_write(kernels: Any) -> None:
    x = torch.randn(16)
    before = x.clone()
    findings = _launch(kernels.restore_kernel, (1,), x, B=16, inputs=[x])
    assert torch.equal(x, before) and "input_write" in findings, findings
    assert _launch(kernels.restore_kernel, (1,), x, B=16) == {}  # not an input: scratch is fine


def test_hint_checks_follow_triton_definitions() -> None:
    from orchestrator.verify.interp_semantics import _hint_violation

    block = np.arange(64, 128, dtype=np.int64)
    assert _hint_violation(block, "multiple_of", [64], 1) == ""  # first of the run: 64
    assert _hint_violation(block + 1, "multiple_of", [64], 1) != ""
    assert _hint_violation(np.array([0, 1, 2, 3, 8, 9, 10, 11]), "max_contiguous", [4], 1) == ""
    assert _hint_violation(np.array([0, 1, 2, 3, 8, 9, 10, 11]), "max_contiguous", [8], 1) != ""
    assert _hint_violation(np.array([5, 5, 5, 5, 1, 1, 1, 1]), "max_constancy", [4], 1) == ""
    wrapped = (np.arange(96, 128) % 100).astype(np.int64)  # the matmul tutorial's (pid * B + arange) % M
    assert _hint_violation(wrapped, "max_contiguous", [32], 1) == ""
    assert _hint_violation(wrapped, "multiple_of", [32], 1) == ""
    assert _hint_violation(np.array([4096, 4100, 4104], dtype=np.uint64), "max_contiguous", [1], 4) == ""
    pointers = np.array([4096, 4100, 4104, 4108], dtype=np.uint64)
    assert _hint_violation(pointers, "max_contiguous", [4], 4) == ""  # float32 pointers: 4 bytes a step
    assert _hint_violation(pointers + 4, "multiple_of", [16], 4) != ""
