"""Parent-side value comparison: elementwise against the parent's own reference.

Everything here runs in the parent on data it loaded with ``weights_only=True``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from orchestrator.verify.models import Flag
from orchestrator.verify.tasks import Tolerance


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


def compare(
    out: torch.Tensor, ref: torch.Tensor, tol: Tolerance, unwritten: torch.Tensor | None = None
) -> Comparison:
    """Elementwise |out - ref| <= atol + rtol * |ref| (integers and bool: exact), same shapes assumed.

    ``unwritten``: where ``out`` still holds the job's allocation sentinel (a NaN with a per-job
    payload for floats, a per-job value for integers); wrong elements there count as unwritten.
    """
    out = out.detach().to("cpu")
    ref = ref.detach().to("cpu")
    if not ref.dtype.is_floating_point and not ref.dtype.is_complex:
        o, r = out.to(torch.float64), ref.to(torch.float64)
        if out.dtype.is_floating_point:  # a float output for an integer reference: compare as floats
            bad = ~torch.isfinite(o) | (o != r)
        elif out.dtype == torch.bool:  # raw bytes: a bool byte that is neither 0 nor 1 is garbage
            bad = out.contiguous().view(torch.uint8).to(torch.int64) != ref.to(torch.int64)
        else:
            bad = out.to(torch.int64) != ref.to(torch.int64)
        err = (o - r).abs()
        finite = torch.isfinite(err)
        nz = finite & (r != 0)
        rel = err[nz] / r[nz].abs()
        n_unwritten = int((bad & unwritten).sum()) if unwritten is not None else 0
        return Comparison(_max(err[finite]), _max(rel), int(bad.sum()), 0, n_unwritten)

    o, r = out.to(torch.float64), ref.to(torch.float64)
    ref_finite, out_finite = torch.isfinite(r), torch.isfinite(o)
    both = ref_finite & out_finite
    err = torch.where(both, (o - r).abs(), torch.zeros_like(r))
    bad_finite = both & (err > tol.atol + tol.rtol * r.abs())
    # where the reference itself is NaN/Inf the output must match it exactly (NaN for NaN)
    bad_nonfinite = ~ref_finite & ~((torch.isnan(r) & torch.isnan(o)) | (r == o))
    sentinel = unwritten if unwritten is not None else torch.zeros_like(ref_finite)
    # a sentinel NaN is an element never written (a mismatch), not a NaN the kernel produced
    nan_inf = ref_finite & ~out_finite & ~sentinel
    bad = bad_finite | bad_nonfinite | (ref_finite & ~out_finite)
    nz = both & (r != 0)
    rel = err[nz] / r[nz].abs()
    return Comparison(
        max_abs_err=_max(err[both]),
        max_rel_err=_max(rel),
        n_mismatch=int((bad & ~nan_inf).sum()),
        n_nan_inf=int(nan_inf.sum()),
        n_unwritten=int((bad & sentinel).sum()),
    )
