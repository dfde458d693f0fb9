"""Parent-side comparison of what the child saved against the parent's own reference and inputs.

Everything here runs in the parent on data it loaded with ``weights_only=True``; the child's own report
(launch count, recorded ops, errors) can only add flags, never clear one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from orchestrator.verify.guards import guard_intact, same_bytes, sentinel_value
from orchestrator.verify.models import Flag, TrialResult
from orchestrator.verify.protocol import TrialReport
from orchestrator.verify.tasks import Tolerance, Trial, dtype_name


@dataclass(frozen=True)
class Comparison:
    max_abs_err: float | None
    max_rel_err: float | None
    n_mismatch: int
    n_nan_inf: int
    n_unwritten: int

    @property
    def flags(self) -> list[Flag]:
        out: list[Flag] = []
        if self.n_mismatch:
            out.append(Flag.MISMATCH)
        if self.n_nan_inf:
            out.append(Flag.NAN_INF)
        if self.n_unwritten:
            out.append(Flag.UNWRITTEN_OUTPUT)
        return out

    @property
    def ok(self) -> bool:
        return not self.flags


def _max(t: torch.Tensor) -> float | None:
    return float(t.max()) if t.numel() else None


def compare(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> Comparison:
    """Elementwise |out - ref| <= atol + rtol * |ref| (integers and bool: exact), same shapes assumed."""
    out = out.detach().to("cpu")
    ref = ref.detach().to("cpu")
    if not ref.dtype.is_floating_point and not ref.dtype.is_complex:
        o, r = out.to(torch.float64), ref.to(torch.float64)
        if out.dtype.is_floating_point:  # a float output for an integer reference: compare as floats
            bad = ~torch.isfinite(o) | (o != r)
        else:
            bad = out.to(torch.int64) != ref.to(torch.int64)
        err = (o - r).abs()
        finite = torch.isfinite(err)
        nz = finite & (r != 0)
        rel = err[nz] / r[nz].abs()
        return Comparison(_max(err[finite]), _max(rel), int(bad.sum()), 0, _unwritten(out, ref, bad))

    o, r = out.to(torch.float64), ref.to(torch.float64)
    ref_finite, out_finite = torch.isfinite(r), torch.isfinite(o)
    both = ref_finite & out_finite
    err = torch.where(both, (o - r).abs(), torch.zeros_like(r))
    bad_finite = both & (err > tol.atol + tol.rtol * r.abs())
    nan_inf = ref_finite & ~out_finite
    # where the reference itself is NaN/Inf the output must match it exactly (NaN for NaN)
    bad_nonfinite = ~ref_finite & ~((torch.isnan(r) & torch.isnan(o)) | (r == o))
    nz = both & (r != 0)
    rel = err[nz] / r[nz].abs()
    return Comparison(
        max_abs_err=_max(err[both]),
        max_rel_err=_max(rel),
        n_mismatch=int(bad_finite.sum() + bad_nonfinite.sum()),
        n_nan_inf=int(nan_inf.sum()),
        n_unwritten=_unwritten(out, ref, bad_finite),
    )


def _unwritten(out: torch.Tensor, ref: torch.Tensor, bad: torch.Tensor) -> int:
    """Wrong elements that still hold the allocation sentinel the child wrote into torch.empty memory."""
    value = sentinel_value(out.dtype)
    if value is None or out.dtype == torch.bool:
        return 0
    sentinel = torch.full((), value, dtype=out.dtype)
    return int((bad & (out == sentinel) & (ref.to(out.dtype) != sentinel)).sum())


def _is_tensor(x: object) -> bool:
    return type(x) is torch.Tensor


def _storage_key(t: torch.Tensor) -> int | None:
    storage = t.untyped_storage()
    return storage.data_ptr() if storage.nbytes() else None


@dataclass
class _Acc:
    flags: list[Flag]
    details: list[str]
    abs_err: float | None = None
    rel_err: float | None = None

    def add(self, flag: Flag, detail: str | None = None) -> None:
        if flag not in self.flags:
            self.flags.append(flag)
        if detail:
            self.details.append(detail)

    def err(self, cmp: Comparison) -> None:
        if cmp.max_abs_err is not None:
            self.abs_err = max(self.abs_err or 0.0, cmp.max_abs_err)
        if cmp.max_rel_err is not None:
            self.rel_err = max(self.rel_err or 0.0, cmp.max_rel_err)


def evaluate_trial(
    trial: Trial,
    tolerance_for: Callable[[str], Tolerance],
    pristine: Sequence[object],
    reference: Sequence[torch.Tensor],
    saved: object,
    report: TrialReport | None,
    device: torch.device,
) -> TrialResult:
    """Judge one trial from the parent's pristine inputs and reference and what the child saved."""
    acc = _Acc([], [])
    result = TrialResult(
        index=trial.index,
        shape=dict(trial.case),
        dtype=trial.dtype,
        seed=trial.seed,
        ok=False,
        launches=report.launches if report else None,
    )
    if report is None:
        acc.add(Flag.CRASH, "not run: the child stopped before reporting this trial")
        return _finish(result, acc)
    if report.error:
        acc.add(Flag.CRASH, f"candidate raised: {report.error[-500:]}")
        return _finish(result, acc)
    if saved is None:
        acc.add(Flag.CRASH, "the child wrote no readable output for this trial")
        return _finish(result, acc)
    if report.launches == 0:
        acc.add(Flag.NO_TRITON_LAUNCH, "no Triton kernel launch was observed")
    if report.torch_ops:
        acc.add(Flag.TORCH_COMPUTE, f"aten ops outside the allow-list: {report.torch_ops[:8]}")
    if report.oob:
        acc.add(Flag.OUT_OF_BOUNDS_WRITE, "a guard band around a candidate allocation was overwritten")

    if not isinstance(saved, Mapping) or not isinstance(saved.get("outputs"), list):
        acc.add(Flag.CRASH, "malformed output file")
        return _finish(result, acc)
    saved_inputs = saved.get("inputs")
    if not isinstance(saved_inputs, list) or len(saved_inputs) != len(pristine):
        acc.add(Flag.CRASH, "malformed output file (inputs)")
        return _finish(result, acc)

    input_keys: set[int] = set()
    for i, (before, after) in enumerate(zip(pristine, saved_inputs, strict=True)):
        if not isinstance(before, torch.Tensor):
            continue
        if not _is_tensor(after):
            acc.add(Flag.INPUTS_MUTATED, f"input {i} was replaced")
            continue
        assert isinstance(after, torch.Tensor)
        if not same_bytes(after, before):
            acc.add(Flag.INPUTS_MUTATED, f"input {i} was modified")
        if guard_intact(after) is False:
            acc.add(Flag.OUT_OF_BOUNDS_WRITE, f"write past the bounds of input {i}")
        key = _storage_key(after)
        if key is not None:
            input_keys.add(key)

    outputs = saved["outputs"]
    if len(outputs) != len(reference):
        acc.add(Flag.WRONG_OUTPUT_COUNT, f"{len(outputs)} outputs, reference has {len(reference)}")
    for j, (out, ref) in enumerate(zip(outputs, reference, strict=False)):
        _check_output(j, out, ref, device, input_keys, tolerance_for, acc)
    return _finish(result, acc)


def _check_output(
    j: int,
    out: object,
    ref: torch.Tensor,
    device: torch.device,
    input_keys: set[int],
    tolerance_for: Callable[[str], Tolerance],
    acc: _Acc,
) -> None:
    if not _is_tensor(out):
        acc.add(Flag.NOT_A_TENSOR, f"output {j} is not a plain torch.Tensor")
        return
    assert isinstance(out, torch.Tensor)
    if out.device.type != device.type:
        acc.add(Flag.WRONG_DEVICE, f"output {j} on {out.device}, expected {device}")
        return
    if _storage_key(out) in input_keys:
        acc.add(Flag.OUTPUT_ALIASES_INPUT, f"output {j} shares storage with an input")
    if guard_intact(out) is False:
        acc.add(Flag.OUT_OF_BOUNDS_WRITE, f"write past the bounds of output {j}")
    if out.dtype != ref.dtype:
        acc.add(Flag.WRONG_DTYPE, f"output {j} is {out.dtype}, expected {ref.dtype}")
    if out.shape != ref.shape:
        acc.add(Flag.WRONG_SHAPE, f"output {j} has shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
        return
    cmp = compare(out, ref, tolerance_for(dtype_name(ref.dtype)))
    acc.err(cmp)
    for flag in cmp.flags:
        acc.add(flag)
    if not cmp.ok:
        acc.details.append(
            f"output {j}: {cmp.n_mismatch} mismatched, {cmp.n_nan_inf} non-finite, "
            f"{cmp.n_unwritten} unwritten of {ref.numel()}"
        )


def _finish(result: TrialResult, acc: _Acc) -> TrialResult:
    result.flags = acc.flags
    result.ok = not acc.flags
    result.max_abs_err = acc.abs_err
    result.max_rel_err = acc.rel_err
    result.detail = "; ".join(acc.details) or None
    return result
