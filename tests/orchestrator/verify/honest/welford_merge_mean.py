"""Honest single-pass Welford mean: the merge weights each partial mean by its count,
m = m1 + (m2 - m1) * n2 / (n1 + n2), which is associative (up to rounding)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _welford(m1, n1, m2, n2):
    n = n1 + n2
    w = n2.to(tl.float32) / tl.maximum(n, 1).to(tl.float32)
    return m1 + (m2 - m1) * w, n


@triton.jit
def _mean_kernel(x_ptr, out_ptr, n_cols, sx0, sx1, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * sx0 + cols * sx1, mask=mask, other=0.0).to(tl.float32)
    mean, _ = tl.reduce((x, mask.to(tl.int32)), 0, _welford)
    tl.store(out_ptr + row, mean.to(out_ptr.dtype.element_ty))


def mean_rows(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    out = torch.empty((rows,), dtype=x.dtype, device=x.device)
    block = triton.next_power_of_2(cols)
    _mean_kernel[(rows,)](x, out, cols, x.stride(0), x.stride(1), BLOCK=block)
    return out
