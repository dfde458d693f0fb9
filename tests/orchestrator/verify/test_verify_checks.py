"""Parent-side verdict logic on fabricated child blobs: tolerances, sentinels, guard layouts, the output
contract, aliasing across calls, stale refills, program order, and the report stream's pessimism."""

from __future__ import annotations

import json
import random

import pytest
import torch

from orchestrator.verify.checks import compare
from orchestrator.verify.guards import (
    allocation_of,
    bands_intact,
    draw_guard_params,
    fill_sentinel,
    guarded_empty,
    guarded_storage,
    place,
    raw_bytes,
    sentinel_mask,
)
from orchestrator.verify.judge import TrialData, judge_trial
from orchestrator.verify.layouts import LayoutError, relayout
from orchestrator.verify.models import Flag
from orchestrator.verify.protocol import (
    BLOB,
    JSON,
    CallPlan,
    CallReport,
    ReportBuilder,
    TrialPlan,
    TrialReport,
)
from orchestrator.verify.tasks import OutputContract, Tolerance, Trial, default_tolerance

CPU = torch.device("cpu")
PARAMS = draw_guard_params()


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
    assert compare(inside, ref.double(), bound).ok
    bad = compare(outside, ref.double(), bound)
    assert bad.flags == [Flag.MISMATCH] and bad.n_mismatch == 4
    assert bad.max_abs_err == pytest.approx(4.0 * tol * 5, rel=1e-6)


def test_integer_and_bool_compare_is_exact() -> None:
    ref = torch.tensor([1, 2, 3], dtype=torch.int32)
    assert compare(ref.clone(), ref, default_tolerance("int32")).ok
    off = compare(ref + torch.tensor([0, 1, 0], dtype=torch.int32), ref, default_tolerance("int32"))
    assert off.flags == [Flag.MISMATCH] and off.n_mismatch == 1 and off.max_abs_err == 1.0
    flags = torch.tensor([True, False])
    assert compare(flags.clone(), flags, default_tolerance("bool")).ok
    assert not compare(~flags, flags, default_tolerance("bool")).ok
    garbage = flags.clone()
    garbage.view(torch.uint8)[0] = 7  # a byte that is neither 0 nor 1: never "True"
    assert not compare(garbage, flags, default_tolerance("bool")).ok


def test_nan_and_inf_handling() -> None:
    tol = default_tolerance("float32")
    ref = torch.tensor([1.0, float("nan"), float("inf"), 2.0])
    assert compare(ref.clone(), ref, tol).ok  # NaN/Inf in the reference must be matched exactly
    out = torch.tensor([float("nan"), float("nan"), float("inf"), 2.0])
    assert compare(out, ref, tol).flags == [Flag.NAN_INF]
    assert compare(torch.tensor([1.0, 0.0, float("inf"), 2.0]), ref, tol).flags == [Flag.MISMATCH]
    assert compare(torch.tensor([1.0, float("nan"), -float("inf"), 2.0]), ref, tol).flags == [Flag.MISMATCH]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64])
def test_sentinels_are_per_job_and_recognised(dtype: torch.dtype) -> None:
    other = draw_guard_params()
    t = torch.empty(8, dtype=dtype)
    fill_sentinel(t, PARAMS)
    mask = sentinel_mask(t, PARAMS)
    assert mask is not None and bool(mask.all())
    if dtype.is_floating_point:
        assert bool(torch.isnan(t.float()).all())  # never equal to anything a kernel computes
    ref = torch.ones(8, dtype=dtype)
    cmp = compare(t, ref, default_tolerance(str(dtype).removeprefix("torch.")), mask)
    assert Flag.UNWRITTEN_OUTPUT in cmp.flags and Flag.MISMATCH in cmp.flags and Flag.NAN_INF not in cmp.flags
    assert other.sentinels != PARAMS.sentinels or other.canary != PARAMS.canary  # drawn per job


def test_guarded_layout_is_recoverable_from_the_storage_alone() -> None:
    t = guarded_empty((3, 5), None, torch.float32, "cpu", PARAMS)
    assert t.is_contiguous() and t._base is None
    alloc = allocation_of(t, PARAMS)
    assert alloc is not None and alloc.data == 60 and alloc.front == t.storage_offset() * 4
    assert bands_intact(t, alloc, PARAMS)
    raw_bytes(t)[-1] = (PARAMS.canary + 1) % 256  # one byte at the far end of the tail band
    assert not bands_intact(t, alloc, PARAMS)
    assert allocation_of(torch.zeros(4), PARAMS) is None  # a plain allocation is not "guarded"
    assert t.data_ptr() % 64 == 0  # bands keep the data start as aligned as the allocation


@pytest.mark.parametrize(
    ("layout", "check"),
    [
        ("offset", lambda t: t.is_contiguous() and t.storage_offset() > 0),
        ("padded", lambda t: t.stride(0) > t.shape[1] and t.stride(1) == 1),
        ("transposed", lambda t: t.stride() == (1, t.shape[0])),
        ("strided", lambda t: t.stride(-1) == 2),
        ("broadcast", lambda t: t.stride(0) == 0 and bool((t == t[0]).all())),
        ("dense", lambda t: t.is_contiguous() and t.storage_offset() == 0),
    ],
)
def test_layouts_keep_values_and_fill_the_rest_with_garbage(layout: str, check: object) -> None:
    x = torch.randn(5, 7)
    y = relayout(x, layout, random.Random(1))
    assert y.shape == x.shape and check(y)  # type: ignore[operator]
    if layout != "broadcast":
        assert torch.equal(y, x)
    storage = torch.empty(0).set_(y.untyped_storage())
    covered = y.numel() if layout != "broadcast" else y[0].numel()
    assert int(torch.isnan(storage).sum()) == storage.numel() - covered  # everything else is NaN
    with pytest.raises(LayoutError):
        relayout(torch.randn(4), "transposed", random.Random(0))


# --- judge_trial on fabricated blobs -----------------------------------------------------------
TRIAL = Trial(index=0, case={"n": 4}, dtype="float32", seed=0)
X = torch.arange(4, dtype=torch.float32)


def guarded_input(x: torch.Tensor = X) -> torch.Tensor:
    raw, front = guarded_storage(x.untyped_storage().nbytes(), "cpu", PARAMS)
    raw[front : front + x.untyped_storage().nbytes()].copy_(raw_bytes(x))
    return place(raw, front, x.dtype, x.shape, x.stride(), x.storage_offset())


def good(values: torch.Tensor | None = None) -> torch.Tensor:
    out = guarded_empty((4,), None, torch.float32, "cpu", PARAMS)
    out.copy_(X * 2 if values is None else values)
    return out


def judge(
    calls: list[dict],
    reports: list[CallReport] | None = None,
    plan: list[CallPlan] | None = None,
    refill: torch.Tensor | None = None,
    live: list[object] | None = None,
    contract: OutputContract = OutputContract(),
):
    plan = plan or [CallPlan("first", "natural", True)]
    reports = reports or [
        CallReport(kind=c.kind, order=c.order, monitored=c.monitored, launches=1) for c in plan
    ]
    data = TrialData(
        TRIAL, TrialPlan(0, plan), [X], [X * 2],
        refill=[refill] if refill is not None else None,
        refill_reference=[refill * 2] if refill is not None else None,
    )  # fmt: skip
    saved = {"calls": calls, "live": live if live is not None else [guarded_input()]}
    return judge_trial(data, saved, None, TrialReport(0, reports), default_tolerance, contract, PARAMS, CPU)


def test_correct_output_passes() -> None:
    result = judge([{"outputs": [good()], "inputs": [guarded_input()]}])
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
    result = judge([{"outputs": outputs, "inputs": [guarded_input()]}])
    assert flag in result.flags and not result.ok


def test_output_contract_offset_slice_strides_view_and_foreign_storage() -> None:
    pool = guarded_empty((12,), None, torch.float32, "cpu", PARAMS)
    pool[4:8] = X * 2
    sliced = judge([{"outputs": [pool[4:8]], "inputs": [guarded_input()]}])
    assert Flag.OUTPUT_CONTRACT in sliced.flags and "start" in (sliced.detail or "")
    head = judge([{"outputs": [pool[:4].copy_(X * 2)], "inputs": [guarded_input()]}])
    assert Flag.OUTPUT_CONTRACT in head.flags and "larger buffer" in (head.detail or "")
    wide = guarded_empty((8,), None, torch.float32, "cpu", PARAMS)
    strided = wide[::2]
    strided.copy_(X * 2)
    assert Flag.OUTPUT_CONTRACT in judge([{"outputs": [strided], "inputs": [guarded_input()]}]).flags
    view = CallReport(launches=1, output_views=[True])
    viewed = judge([{"outputs": [good()], "inputs": [guarded_input()]}], reports=[view])
    assert viewed.flags == [Flag.OUTPUT_CONTRACT] and "view" in (viewed.detail or "")
    foreign = judge([{"outputs": [X * 2], "inputs": [guarded_input()]}])  # not from an allowed allocator
    assert foreign.flags == [Flag.OUTPUT_CONTRACT]
    relaxed = OutputContract(contiguous=False, own_storage=False, no_view=False)
    assert judge([{"outputs": [strided], "inputs": [guarded_input()]}], contract=relaxed).ok


def test_blind_calls_are_judged_on_plain_storages() -> None:
    plan = [CallPlan("blind", "natural", False)]
    plain_input = X.clone()
    ok = judge([{"outputs": [X * 2], "inputs": [plain_input]}], plan=plan, live=[plain_input])
    assert ok.ok, ok.detail
    sliced = judge([{"outputs": [(torch.zeros(8))[2:6].copy_(X * 2)], "inputs": [plain_input]}], plan=plan)
    assert Flag.OUTPUT_CONTRACT in sliced.flags


def test_aliasing_inputs_and_earlier_calls() -> None:
    x = guarded_input()
    result = judge([{"outputs": [x], "inputs": [guarded_input()]}], live=[x])
    assert Flag.OUTPUT_ALIASES_INPUT in result.flags
    shared = good()
    plan = [CallPlan("first", "natural", True), CallPlan("repeat", "reversed", True)]
    calls = [{"outputs": [shared], "inputs": [guarded_input()]} for _ in plan]
    reused = judge(calls, plan=plan)
    assert Flag.OUTPUT_REUSED in reused.flags and reused.calls[0].ok and not reused.calls[1].ok
    across = CallReport(launches=1, output_reused=[True])  # the child saw an earlier trial's storage
    assert judge([{"outputs": [good()], "inputs": [guarded_input()]}], reports=[across]).flags == [
        Flag.OUTPUT_REUSED
    ]


def test_inputs_checked_on_the_whole_storage_and_bands() -> None:
    mutated = guarded_input()
    mutated.add_(1)
    result = judge([{"outputs": [good()], "inputs": [mutated]}])
    assert result.flags == [Flag.INPUTS_MUTATED] and "inside" in (result.detail or "")
    damaged = guarded_input()
    raw_bytes(damaged)[0] = (PARAMS.canary + 1) % 256
    assert judge([{"outputs": [good()], "inputs": [damaged]}]).flags == [Flag.OUT_OF_BOUNDS_WRITE]
    out = good()
    raw_bytes(out)[-4:] = 0
    assert judge([{"outputs": [out], "inputs": [guarded_input()]}]).flags == [Flag.OUT_OF_BOUNDS_WRITE]


def test_padding_of_an_input_is_part_of_it() -> None:
    padded = relayout(torch.randn(3, 5), "padded", random.Random(0))
    snap_raw, front = guarded_storage(padded.untyped_storage().nbytes(), "cpu", PARAMS)
    snap_raw[front : front + padded.untyped_storage().nbytes()].copy_(raw_bytes(padded))
    snap = place(snap_raw, front, padded.dtype, padded.shape, padded.stride(), padded.storage_offset())
    raw_bytes(snap)[front + 4 * 5 + 3] = 0x55  # a byte of the first row's padding, outside the view
    data = TrialData(TRIAL, TrialPlan(0, [CallPlan("first", "natural", True)]), [padded], [padded * 2])
    out = guarded_empty((3, 5), None, torch.float32, "cpu", PARAMS)
    out.copy_(padded * 2)
    saved = {"calls": [{"outputs": [out], "inputs": [snap]}], "live": [snap]}
    report = TrialReport(0, [CallReport(launches=1)])
    result = judge_trial(data, saved, None, report, default_tolerance, OutputContract(), PARAMS, CPU)
    assert result.flags == [Flag.INPUTS_MUTATED] and "outside its view" in (result.detail or "")


def test_stale_refill_and_program_order() -> None:
    new = torch.tensor([5.0, 6.0, 7.0, 8.0])
    plan = [CallPlan("first", "natural", True), CallPlan("refill", "shuffled", True)]
    calls = [
        {"outputs": [good()], "inputs": [guarded_input()]},
        {"outputs": [good()], "inputs": [guarded_input(new)]},  # answers the old values
    ]
    stale = judge(calls, plan=plan, refill=new)
    assert {Flag.MISMATCH, Flag.STALE_OUTPUT} <= set(stale.flags) and stale.calls[0].ok
    plan = [CallPlan("first", "natural", True), CallPlan("repeat", "reversed", True)]
    calls = [
        {"outputs": [good()], "inputs": [guarded_input()]},
        {"outputs": [good(X * 3)], "inputs": [guarded_input()]},
    ]
    order = judge(calls, plan=plan)
    assert {Flag.MISMATCH, Flag.PROGRAM_ORDER_DEPENDENT} <= set(order.flags)


def test_child_findings_only_add_flags() -> None:
    ok_call = [{"outputs": [good()], "inputs": [guarded_input()]}]
    assert Flag.NO_TRITON_LAUNCH in judge(ok_call, reports=[CallReport(launches=0)]).flags
    for kind, flag in [
        ("torch_compute", Flag.TORCH_COMPUTE),
        ("host_compute", Flag.HOST_COMPUTE),
        ("tamper", Flag.MONITOR_TAMPERED),
        ("forbidden", Flag.FORBIDDEN_RUNTIME_CALL),
        ("oob_read", Flag.OUT_OF_BOUNDS_READ),
        ("order", Flag.PROGRAM_ORDER_DEPENDENT),
    ]:
        result = judge(ok_call, reports=[CallReport(launches=1, findings={kind: ["x"]})])
        assert result.flags == [flag], kind
    crashed = judge(ok_call, reports=[CallReport(launches=1, error="RuntimeError: boom")])
    assert crashed.flags == [Flag.CRASH] and "boom" in (crashed.detail or "")
    stalled = judge(ok_call, reports=[CallReport(launches=1, error="stalled", stalled=True)])
    assert stalled.flags == [Flag.PROGRAM_ORDER_DEPENDENT]
    data = TrialData(TRIAL, TrialPlan(0, [CallPlan("first", "natural", True)]), [X], [X * 2])
    for saved, report in [
        (None, TrialReport(0, [CallReport()])),
        ({"calls": 1}, TrialReport(0, [CallReport()])),
    ]:
        result = judge_trial(data, saved, None, report, default_tolerance, OutputContract(), PARAMS, CPU)
        assert result.flags == [Flag.CRASH]
    missing = judge_trial(
        data, {"calls": [], "live": []}, None, None, default_tolerance, OutputContract(), PARAMS, CPU
    )
    assert missing.flags == [Flag.CRASH]
    forged = TrialReport(0, [CallReport(launches=1)], duplicate=True)
    result = judge_trial(
        data,
        {"calls": ok_call, "live": [guarded_input()]},
        None,
        forged,
        default_tolerance,
        OutputContract(),
        PARAMS,
        CPU,
    )
    assert result.flags == [Flag.MONITOR_TAMPERED]


def _frame(kind: bytes, payload: bytes) -> tuple[bytes, bytes]:
    return kind, payload


def test_report_stream_is_defensive_and_pessimistic() -> None:
    builder = ReportBuilder()
    event = {
        "event": "trial",
        "index": 0,
        "blob": True,
        "calls": [{"launches": 2, "findings": {"tamper": ["a"]}}],
    }
    builder.feed(JSON, json.dumps(event).encode())
    builder.feed(BLOB, b"first")
    builder.feed(JSON, b"garbage")
    builder.feed(JSON, json.dumps({"event": "trial", "index": 0, "calls": [{"launches": "many"}]}).encode())
    builder.feed(BLOB, b"no event before me")
    builder.feed(JSON, json.dumps({"event": "timing", "index": 0, "samples_ms": [1.0, "x"]}).encode())
    builder.feed(JSON, json.dumps([1, 2]).encode())
    builder.feed(JSON, json.dumps({"event": "done"}).encode())
    report = builder.report
    assert report.done and report.blobs == {0: b"first"} and report.timings == {}
    assert report.trials[0].duplicate and report.trials[0].calls[0].findings == {"tamper": ["a"]}
    assert report.trials[0].calls[1].launches is None
    assert report.stream_error  # the stray blob is evidence, not ignored
