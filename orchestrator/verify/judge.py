"""Parent-side judgement of one trial: every call's outputs, inputs and the child's findings.

The parent has its own pristine inputs and references; the child's blob (loaded with
``weights_only=True``) holds, per call, exactly what the candidate returned and a snapshot of every
input's whole storage (guard bands included). The child's report can only add flags.

Per call: output count, type, device, dtype, shape; the output contract (dense, contiguous, starting at
its storage's beginning, a storage exactly the size the shape needs, not a view); aliasing with any
input and with any other output of the trial (a workspace handed out twice); guard bands; values
against the reference of the values the call saw (after a refill: the new ones); input storages
unchanged, padding included. Across calls: a refill answered with the old values is ``stale_output``;
the same inputs right in natural program order and wrong in another are ``program_order_dependent``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from orchestrator.verify.checks import Comparison, compare
from orchestrator.verify.device_shapes import sampled_output, share
from orchestrator.verify.guards import (
    Allocation,
    GuardParams,
    allocation_of,
    bands_intact,
    raw_bytes,
    same_bytes,
    sentinel_mask,
)
from orchestrator.verify.models import CallResult, Flag, TrialResult
from orchestrator.verify.protocol import CallPlan, CallReport, TrialPlan, TrialReport
from orchestrator.verify.runtime_policy import FLAG_FOR_FINDING, NOTE_FOR_FINDING
from orchestrator.verify.tasks import OutputContract, TaskError, Tolerance, Trial, dtype_name

VALUE_FLAGS = frozenset({Flag.MISMATCH, Flag.NAN_INF, Flag.UNWRITTEN_OUTPUT, Flag.STALE_OUTPUT})
# A device-shape trial failing with one of these is flagged device_shapes too (wrong values, a part
# of the output never written, indices that wrap or run past the tensors).
DEVICE_SHAPE_FLAGS = VALUE_FLAGS | {Flag.OUT_OF_BOUNDS_READ, Flag.OUT_OF_BOUNDS_WRITE}


@dataclass(frozen=True)
class TrialData:
    """What the parent knows about one trial (never sent to the child except the inputs)."""

    trial: Trial
    plan: TrialPlan
    inputs: list[object]  # pristine, in the trial's layouts, on the CPU
    reference: list[torch.Tensor]
    refill: list[object] | None = None
    refill_reference: list[torch.Tensor] | None = None
    refill_seed: int | None = None


@dataclass
class _Acc:
    flags: list[Flag] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    abs_err: float | None = None
    rel_err: float | None = None
    not_judged: list[str] = field(default_factory=list)  # sampled outputs nothing can be compared of
    compared: list[str] = field(default_factory=list)  # sampled outputs: how much was compared

    def add(self, flag: Flag, detail: str | None = None) -> None:
        if flag not in self.flags:
            self.flags.append(flag)
        if detail and detail not in self.details and len(self.details) < 12:
            self.details.append(detail)

    def err(self, cmp: Comparison) -> None:
        if cmp.max_abs_err is not None:
            self.abs_err = max(self.abs_err or 0.0, cmp.max_abs_err)
        if cmp.max_rel_err is not None:
            self.rel_err = max(self.rel_err or 0.0, cmp.max_rel_err)


def _key(t: torch.Tensor) -> int | None:
    storage = t.untyped_storage()
    return storage.data_ptr() if storage.nbytes() else None


def _findings(report: CallReport, acc: _Acc) -> None:
    if report.stalled:
        acc.add(Flag.PROGRAM_ORDER_DEPENDENT, "a program waited on another program (stopped)")
    for kind, details in report.findings.items():
        flag = FLAG_FOR_FINDING.get(kind)
        if flag:
            acc.add(Flag(flag), f"{kind}: {'; '.join(details[:4])}")
    if report.launches == 0:  # blind calls are counted too, by the interpreter (cpu pool)
        acc.add(Flag.NO_TRITON_LAUNCH, "no Triton kernel launch was observed")


def _check_input(i: int, expected: torch.Tensor, snap: object, guards: GuardParams | None, acc: _Acc) -> None:
    if type(snap) is not torch.Tensor:
        acc.add(Flag.INPUTS_MUTATED, f"input {i} was replaced")
        return
    assert isinstance(snap, torch.Tensor)
    want = raw_bytes(expected)
    size = want.numel()
    front = guards.front(size) if guards else 0
    total = guards.total(size) if guards else size
    got = raw_bytes(snap).to("cpu")
    if (
        snap.dtype != expected.dtype
        or snap.shape != expected.shape
        or snap.stride() != expected.stride()
        or snap.storage_offset() * snap.element_size() - front
        != expected.storage_offset() * expected.element_size()
        or got.numel() != total
    ):
        acc.add(Flag.INPUTS_MUTATED, f"input {i} was reshaped or replaced")
        return
    if not torch.equal(got[front : front + size], want):
        inside = same_bytes(snap, expected)
        where = "outside its view (padding or gaps)" if inside else "inside its view"
        acc.add(Flag.INPUTS_MUTATED, f"input {i} was modified {where}")
    if guards and not bands_intact(snap, Allocation(front, size, total - front - size), guards):
        acc.add(Flag.OUT_OF_BOUNDS_WRITE, f"write past the bounds of input {i}")


def _contract(
    j: int,
    out: torch.Tensor,
    contract: OutputContract,
    guards: GuardParams | None,
    is_view: bool,
    acc: _Acc,
) -> None:
    needed = out.numel() * out.element_size()
    if contract.contiguous and not out.is_contiguous():
        acc.add(Flag.OUTPUT_CONTRACT, f"output {j} is not contiguous (strides {tuple(out.stride())})")
    if contract.no_view and is_view:
        acc.add(Flag.OUTPUT_CONTRACT, f"output {j} is a view of another tensor")
    offset = out.storage_offset() * out.element_size()
    if guards is None:
        storage, start = out.untyped_storage().nbytes(), offset
    else:
        alloc = allocation_of(out, guards)
        if alloc is None:
            if contract.own_storage:
                acc.add(
                    Flag.OUTPUT_CONTRACT,
                    f"output {j} was not allocated during the call by an allowed allocator",
                )
            return
        if not bands_intact(out, alloc, guards):
            acc.add(Flag.OUT_OF_BOUNDS_WRITE, f"write past the bounds of output {j}")
        storage, start = alloc.data, offset - alloc.front
    if contract.own_storage and (start != 0 or storage != needed):
        what = "does not start at its storage's beginning" if start else "is a slice of a larger buffer"
        acc.add(Flag.OUTPUT_CONTRACT, f"output {j} {what} ({storage} bytes of storage for {needed})")


def _judge_call(
    index: int,
    plan: CallPlan,
    report: CallReport,
    saved: Mapping[str, object],
    expected_inputs: Sequence[object],
    reference: Sequence[torch.Tensor],
    live_keys: set[int],
    seen: dict[int, str],
    tolerance_for: Callable[[str], Tolerance],
    contract: OutputContract,
    params: GuardParams,
    device: torch.device,
    sampled: bool = False,
) -> tuple[_Acc, list[torch.Tensor | None]]:
    acc = _Acc()
    _findings(report, acc)
    if report.error and not report.stalled:
        acc.add(Flag.CRASH, f"candidate raised: {report.error[-500:]}")
        return acc, []
    guards = params if plan.monitored and plan.guarded else None
    snaps = saved.get("inputs")
    outputs = saved.get("outputs")
    if not isinstance(snaps, list) or len(snaps) != len(expected_inputs) or not isinstance(outputs, list):
        acc.add(Flag.CRASH, "malformed output blob")
        return acc, []
    for i, (expected, snap) in enumerate(zip(expected_inputs, snaps, strict=True)):
        if isinstance(expected, torch.Tensor):
            _check_input(i, expected, snap, guards, acc)
    if report.stalled:
        return acc, []
    if len(outputs) != len(reference):
        acc.add(Flag.WRONG_OUTPUT_COUNT, f"{len(outputs)} outputs, reference has {len(reference)}")
    plain: list[torch.Tensor | None] = []
    for j, (out, ref) in enumerate(zip(outputs, reference, strict=False)):
        if type(out) is not torch.Tensor:
            acc.add(Flag.NOT_A_TENSOR, f"output {j} is not a plain torch.Tensor")
            plain.append(None)
            continue
        assert isinstance(out, torch.Tensor)
        plain.append(out)
        if out.device.type != device.type:
            acc.add(Flag.WRONG_DEVICE, f"output {j} on {out.device}, expected {device}")
            continue
        key = _key(out)
        if key is not None and key in live_keys:
            acc.add(Flag.OUTPUT_ALIASES_INPUT, f"output {j} shares storage with an input")
        elif key is not None and key in seen:
            acc.add(Flag.OUTPUT_REUSED, f"output {j} shares storage with {seen[key]}")
        if key is not None:
            seen.setdefault(key, f"output {j} of call {index}")
        if j < len(report.output_reused) and report.output_reused[j]:
            acc.add(Flag.OUTPUT_REUSED, f"output {j} shares storage with an output of the previous trial")
        if out.dtype != ref.dtype:
            acc.add(Flag.WRONG_DTYPE, f"output {j} is {out.dtype}, expected {ref.dtype}")
        if out.shape != ref.shape:
            acc.add(Flag.WRONG_SHAPE, f"output {j} has shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
            continue
        is_view = j < len(report.output_views) and report.output_views[j]
        _contract(j, out, contract, guards, is_view, acc)
        mask = sentinel_mask(out, params) if guards is not None else None
        if sampled:  # a device shape: only what the executed programs computed (device_shapes.py)
            values = _sampled_values(j, out, ref, mask, saved, acc)
            if values is None:
                continue
            out, ref, mask = values
        cmp = compare(out, ref, tolerance_for(dtype_name(ref.dtype)), mask)
        acc.err(cmp)
        for flag in cmp.flags:
            acc.add(flag)
        if not cmp.ok:
            acc.details.append(
                f"output {j}: {cmp.n_mismatch} mismatched, {cmp.n_nan_inf} non-finite, "
                f"{cmp.n_unwritten} unwritten of {ref.numel()}"
            )
    if any(f in acc.flags for f in (Flag.MISMATCH, Flag.NAN_INF, Flag.UNWRITTEN_OUTPUT)):
        for kind, note in NOTE_FOR_FINDING.items():  # wrong, and a note says why (a tie, ...)
            if report.findings.get(kind):
                acc.add(Flag(note), f"{kind}: {'; '.join(report.findings[kind][:2])}")
    return acc, plain


def judge_trial(
    data: TrialData,
    saved: object,
    load_error: str | None,
    report: TrialReport | None,
    tolerance_for: Callable[[str], Tolerance],
    contract: OutputContract,
    params: GuardParams,
    device: torch.device,
) -> TrialResult:
    trial = data.trial
    try:
        tol: Tolerance | None = tolerance_for(trial.dtype)
    except TaskError:
        tol = None
    result = TrialResult(
        index=trial.index,
        shape=dict(trial.case),
        dtype=trial.dtype,
        seed=trial.seed,
        refill_seed=data.refill_seed,
        layout={str(k): v for k, v in trial.layout.items()},
        ok=False,
        fresh=trial.fresh,
        regression=trial.regression,
        special=list(trial.special),
        atol=tol.atol if tol is not None else None,
        rtol=tol.rtol if tol is not None else None,
    )
    top = _Acc()
    if report is None:
        top.add(Flag.CRASH, "not run: the child stopped before reporting this trial")
    elif report.duplicate:
        top.add(Flag.MONITOR_TAMPERED, "more than one report arrived for this trial (forged)")
    if report is not None and (saved is None or not isinstance(saved, Mapping)):
        top.add(Flag.CRASH, load_error or "the child sent no readable outputs for this trial")
    calls_saved = saved.get("calls") if isinstance(saved, Mapping) else None
    live = saved.get("live") if isinstance(saved, Mapping) else None
    if (
        report is not None
        and not top.flags
        and (not isinstance(calls_saved, list) or not isinstance(live, list))
    ):
        top.add(Flag.CRASH, "malformed output blob")
    if top.flags or report is None:
        return _finish(result, top, [])
    assert isinstance(calls_saved, list) and isinstance(live, list)
    live_keys = {k for x in live if type(x) is torch.Tensor for k in [_key(x)] if k is not None}
    seen: dict[int, str] = {}
    calls: list[CallResult] = []
    accs: list[_Acc] = []
    values: list[list[torch.Tensor | None]] = []
    for index, plan in enumerate(data.plan.calls):
        if (
            index >= len(report.calls)
            or index >= len(calls_saved)
            or not isinstance(calls_saved[index], Mapping)
        ):
            if not any(Flag.CRASH in a.flags for a in accs):
                top.add(Flag.CRASH, f"call {index} ({plan.kind}) was not run or not saved")
            break
        refilled = plan.kind == "refill" and data.refill is not None and data.refill_reference is not None
        expected = data.refill if refilled else data.inputs
        reference = data.refill_reference if refilled else data.reference
        assert expected is not None and reference is not None
        acc, plain = _judge_call(
            index, plan, report.calls[index], calls_saved[index], expected, reference, live_keys, seen,
            tolerance_for, contract, params, device, data.plan.sample is not None,
        )  # fmt: skip
        if refilled and Flag.MISMATCH in acc.flags and _answers(plain, data.reference, tolerance_for):
            acc.add(Flag.STALE_OUTPUT, "after the in-place refill the output still answers the old inputs")
        accs.append(acc)
        values.append(plain)
        calls.append(
            CallResult(
                kind=plan.kind,
                order=plan.order,
                monitored=plan.monitored,
                guarded=plan.monitored and plan.guarded,
                ok=not acc.flags,
                flags=acc.flags,
                max_abs_err=acc.abs_err,
                detail="; ".join(acc.details) or None,
                launches=report.calls[index].launches,
            )
        )
    _order_dependence(data.plan, accs)
    for acc in accs:
        for flag in acc.flags:
            top.add(flag)
        top.details += [d for d in acc.details if d not in top.details][:4]
        if acc.abs_err is not None:
            top.abs_err = max(top.abs_err or 0.0, acc.abs_err)
        if acc.rel_err is not None:
            top.rel_err = max(top.rel_err or 0.0, acc.rel_err)
    result.launches = calls[0].launches if calls else None
    if data.plan.sample is not None:
        _device_shape(result, top, accs, calls_saved)
    return _finish(result, top, calls)


def _sampled_values(
    j: int,
    out: torch.Tensor,
    ref: torch.Tensor,
    mask: torch.Tensor | None,
    saved: Mapping[str, object],
    acc: _Acc,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None:
    """The elements of one output a sampled call lets the parent compare (None: none)."""
    states = saved.get("states")
    state = states[j] if isinstance(states, list) and j < len(states) else None
    verdict = sampled_output(j, out, state)
    if verdict.never_written and saved.get("atomics_sampled") is True:  # maybe waiting on skipped ones
        acc.not_judged.append(f"{verdict.never_written}, after atomics in a sampled launch")
        return None
    if verdict.never_written:
        acc.add(Flag.UNWRITTEN_OUTPUT, verdict.never_written)
        return None
    if verdict.valid is None or not bool(verdict.valid.any()):
        acc.not_judged.append(verdict.not_judged or f"output {j}: no element was computed from valid data")
        return None
    valid = verdict.valid
    acc.compared.append(f"output {j}: {share(valid)}")
    return out[valid], ref[valid], mask[valid] if mask is not None else None


def _device_shape(result: TrialResult, top: _Acc, accs: Sequence[_Acc], calls_saved: list[object]) -> None:
    """A sampled trial on a device shape: name the failure, or say what was (not) compared."""
    first = calls_saved[0] if calls_saved and isinstance(calls_saved[0], Mapping) else {}
    what = str(first.get("sampled") or "no launch was sampled")[:300]
    compared = [c for a in accs for c in a.compared]
    not_judged = [n for a in accs for n in a.not_judged]
    failed = [f for f in top.flags if f not in (Flag.CRASH, Flag.TIMEOUT)]
    if set(failed) & DEVICE_SHAPE_FLAGS:  # what a shape-bound bug looks like; others keep their flag
        top.add(Flag.DEVICE_SHAPES, f"wrong on the device shape {result.shape} (sampled programs)")
    result.device_shape = bool(failed) or not not_judged
    if not_judged and not failed:
        what = f"not judged: {'; '.join(not_judged[:3])}; {what}"
    elif compared:
        what = f"{what}; compared {'; '.join(compared[:3])}"
    result.sampled = what[:500]


def _answers(
    outputs: Sequence[torch.Tensor | None], reference: Sequence[torch.Tensor], tol: Callable[[str], Tolerance]
) -> bool:
    if len(outputs) != len(reference):
        return False
    for out, ref in zip(outputs, reference, strict=True):
        if out is None or out.shape != ref.shape or out.dtype != ref.dtype:
            return False
        if not compare(out, ref, tol(dtype_name(ref.dtype))).ok:
            return False
    return True


def _order_dependence(plan: TrialPlan, accs: list[_Acc]) -> None:
    """The same inputs, right in natural program order and wrong in another order."""
    natural_ok = [
        not (set(a.flags) & VALUE_FLAGS)
        for c, a in zip(plan.calls, accs, strict=False)
        if c.kind in ("first", "repeat") and c.order == "natural"
    ]
    if not natural_ok or not all(natural_ok):
        return
    for call, acc in zip(plan.calls, accs, strict=False):
        if call.kind in ("first", "repeat") and call.order not in ("natural", "device"):
            if set(acc.flags) & VALUE_FLAGS:
                acc.add(
                    Flag.PROGRAM_ORDER_DEPENDENT,
                    f"right with programs in natural order, wrong in {call.order} order (same inputs)",
                )


def _finish(result: TrialResult, acc: _Acc, calls: list[CallResult]) -> TrialResult:
    result.flags = acc.flags
    result.ok = not acc.flags
    result.max_abs_err = acc.abs_err
    result.max_rel_err = acc.rel_err
    result.detail = "; ".join(acc.details) or None
    result.calls = calls
    return result
