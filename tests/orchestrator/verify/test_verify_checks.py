"""Parent-side verdict logic: tolerances per dtype, flags from fabricated child outputs, guards."""

from __future__ import annotations

import pytest
import torch

from orchestrator.verify.checks import compare, evaluate_trial
from orchestrator.verify.guards import (
    CANARY_BYTE,
    guard_intact,
    guarded_copy,
    guarded_empty,
    same_bytes,
    sentinel_value,
)
from orchestrator.verify.models import Flag
from orchestrator.verify.protocol import TrialReport, parse_status
from orchestrator.verify.tasks import Tolerance, Trial, default_tolerance

CPU = torch.device("cpu")


@pytest.mark.parametrize(
    ("dtype", "tol"),
    [("float32", 1e-4), ("float16", 1e-2), ("bfloat16", 2e-2), ("float64", 1e-7)],
)
def test_default_float_tolerances(dtype: str, tol: float) -> None:
    assert default_tolerance(dtype) == Tolerance(tol, tol)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64", "bool"])
def test_integers_are_exact(dtype: str) -> None:
    assert default_tolerance(dtype).exact


@pytest.mark.parametrize(
    ("dtype", "tol"),
    [(torch.float32, 1e-4), (torch.float16, 1e-2), (torch.bfloat16, 2e-2)],
)
def test_float_compare_at_the_tolerance_edge(dtype: torch.dtype, tol: float) -> None:
    ref = torch.tensor([1.0, 2.0, -4.0, 0.0], dtype=dtype)
    bound = default_tolerance(str(dtype).removeprefix("torch."))
    inside = ref.double() + 0.5 * tol * (1 + ref.double().abs())
    outside = ref.double() + 4.0 * tol * (1 + ref.double().abs())
    # compare in float64 so rounding back to the low-precision dtype does not blur the edge
    assert compare(inside, ref.double(), bound).ok
    bad = compare(outside, ref.double(), bound)
    assert bad.flags == [Flag.MISMATCH] and bad.n_mismatch == 4
    assert bad.max_abs_err == pytest.approx(4.0 * tol * 5, rel=1e-6)


def test_fp16_result_rounding_is_within_fp16_tolerance() -> None:
    ref = torch.linspace(-3, 3, 101, dtype=torch.float32)
    out = ref.to(torch.float16)
    assert compare(out.float(), ref, default_tolerance("float16")).ok
    assert not compare(out.float(), ref, default_tolerance("float32")).ok


def test_integer_compare_is_exact() -> None:
    ref = torch.tensor([1, 2, 3], dtype=torch.int32)
    assert compare(ref.clone(), ref, default_tolerance("int32")).ok
    off = compare(ref + torch.tensor([0, 1, 0], dtype=torch.int32), ref, default_tolerance("int32"))
    assert off.flags == [Flag.MISMATCH] and off.n_mismatch == 1 and off.max_abs_err == 1.0
    flags = torch.tensor([True, False])
    assert compare(flags.clone(), flags, default_tolerance("bool")).ok
    assert not compare(~flags, flags, default_tolerance("bool")).ok


def test_nan_and_inf_handling() -> None:
    tol = default_tolerance("float32")
    ref = torch.tensor([1.0, float("nan"), float("inf"), 2.0])
    assert compare(ref.clone(), ref, tol).ok  # NaN/Inf in the reference must be matched exactly
    out = torch.tensor([float("nan"), float("nan"), float("inf"), 2.0])
    assert compare(out, ref, tol).flags == [Flag.NAN_INF]
    out = torch.tensor([1.0, 0.0, float("inf"), 2.0])  # a finite value where the reference is NaN
    assert compare(out, ref, tol).flags == [Flag.MISMATCH]
    out = torch.tensor([1.0, float("nan"), float("-inf"), 2.0])
    assert compare(out, ref, tol).flags == [Flag.MISMATCH]


def test_unwritten_sentinel_is_recognised() -> None:
    ref = torch.ones(8)
    out = ref.clone()
    out[5:] = sentinel_value(torch.float32)
    cmp = compare(out, ref, default_tolerance("float32"))
    assert set(cmp.flags) == {Flag.MISMATCH, Flag.UNWRITTEN_OUTPUT} and cmp.n_unwritten == 3


def test_guards_layout_and_detection() -> None:
    t = guarded_empty((3, 5), None, torch.float32, "cpu")
    assert t.is_contiguous() and guard_intact(t) is True
    raw = torch.empty(0, dtype=torch.uint8).set_(
        t.untyped_storage(), 0, (t.untyped_storage().nbytes(),), (1,)
    )
    assert int(raw[0]) == CANARY_BYTE
    raw[-1] = 0  # one byte past the data, at the far end of the tail guard
    assert guard_intact(t) is False
    assert guard_intact(torch.zeros(4)) is None  # not the guarded layout: unknown, not a failure
    src = torch.randn(7)
    assert same_bytes(guarded_copy(src, "cpu"), src)
    transposed = torch.randn(5, 3).t()
    copy = guarded_copy(transposed, "cpu")
    assert copy.stride() == transposed.stride() and torch.equal(copy, transposed)
    assert guard_intact(copy) is True
    assert copy.data_ptr() % 64 == 0  # guards keep the data start aligned
    expanded = torch.randn(3, 1).expand(3, 4)
    assert torch.equal(guarded_copy(expanded, "cpu"), expanded)


# --- evaluate_trial on fabricated child outputs ----------------------------------------------------
TRIAL = Trial(index=0, case={"n": 4}, dtype="float32", seed=0)
OK_REPORT = TrialReport(index=0, launches=1)


def judge(outputs: list[object], inputs: list[object] | None = None, report: TrialReport | None = OK_REPORT):
    x = torch.arange(4, dtype=torch.float32)
    pristine = [x]
    ref = [x * 2]
    saved = {"outputs": outputs, "inputs": inputs if inputs is not None else [guarded_copy(x, "cpu")]}
    return evaluate_trial(TRIAL, default_tolerance, pristine, ref, saved, report, CPU)


def good() -> torch.Tensor:
    out = guarded_empty((4,), None, torch.float32, "cpu")
    out.copy_(torch.arange(4, dtype=torch.float32) * 2)
    return out


def test_correct_output_passes() -> None:
    result = judge([good()])
    assert result.ok and result.flags == [] and result.max_abs_err == 0.0 and result.launches == 1


@pytest.mark.parametrize(
    ("outputs", "flag"),
    [
        ([good().half()], Flag.WRONG_DTYPE),
        ([good().reshape(2, 2)], Flag.WRONG_SHAPE),
        ([torch.empty(4, device="meta")], Flag.WRONG_DEVICE),
        ([3.0], Flag.NOT_A_TENSOR),
        ([torch.nn.Parameter(torch.arange(4.0) * 2)], Flag.NOT_A_TENSOR),
        ([None], Flag.NOT_A_TENSOR),
        ([good(), good()], Flag.WRONG_OUTPUT_COUNT),
        ([], Flag.WRONG_OUTPUT_COUNT),
    ],
)
def test_output_flags(outputs: list[object], flag: Flag) -> None:
    result = judge(outputs)
    assert flag in result.flags and not result.ok


def test_alias_mutation_and_oob() -> None:
    x = guarded_copy(torch.arange(4, dtype=torch.float32), "cpu")
    result = judge([x], inputs=[x])
    assert Flag.OUTPUT_ALIASES_INPUT in result.flags
    mutated = guarded_copy(torch.arange(4, dtype=torch.float32) * 2, "cpu")
    result = judge([good()], inputs=[mutated])
    assert result.flags == [Flag.INPUTS_MUTATED]
    out = good()
    storage = torch.empty(0, dtype=torch.uint8).set_(
        out.untyped_storage(), 0, (out.untyped_storage().nbytes(),), (1,)
    )
    storage[-4:] = 0
    assert judge([out]).flags == [Flag.OUT_OF_BOUNDS_WRITE]


def test_child_reports_only_add_flags() -> None:
    assert Flag.NO_TRITON_LAUNCH in judge([good()], report=TrialReport(index=0, launches=0)).flags
    ops = TrialReport(index=0, launches=1, torch_ops=["aten.add.Tensor"])
    assert judge([good()], report=ops).flags == [Flag.TORCH_COMPUTE]
    crashed = judge([good()], report=TrialReport(index=0, launches=1, error="RuntimeError: boom"))
    assert crashed.flags == [Flag.CRASH] and "boom" in (crashed.detail or "")
    assert judge([good()], report=None).flags == [Flag.CRASH]
    missing = evaluate_trial(
        TRIAL, default_tolerance, [torch.zeros(4)], [torch.zeros(4)], None, OK_REPORT, CPU
    )
    assert missing.flags == [Flag.CRASH]
    malformed = evaluate_trial(
        TRIAL, default_tolerance, [torch.zeros(4)], [torch.zeros(4)], [1], OK_REPORT, CPU
    )
    assert malformed.flags == [Flag.CRASH]


def test_status_parsing_is_defensive_and_pessimistic() -> None:
    text = "\n".join(
        [
            "garbage",
            '{"event": "trial", "index": 0, "launches": 2, "torch_ops": ["aten.add.Tensor"]}',
            '{"event": "trial", "index": 0, "launches": 5, "torch_ops": [], "oob": false}',
            '{"event": "trial", "index": 1, "launches": "many", "torch_ops": 7}',
            '{"event": "timing", "index": 0, "samples_ms": [1.0, "x"]}',
            "[1, 2]",
            '{"event": "done"}',
        ]
    )
    report = parse_status(text)
    assert report.done
    assert report.trials[0].launches == 2 and report.trials[0].torch_ops == ["aten.add.Tensor"]
    assert report.trials[1].launches is None and report.trials[1].torch_ops == []
    assert report.timings == {}
