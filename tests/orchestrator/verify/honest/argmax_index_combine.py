"""Honest row argmax through tl.reduce with its own (value, index) combine: the larger value wins, and
on a tie the smaller index, so the combine is associative and commutative (first index on ties)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _pick(v1, i1, v2, i2):
    first = (v1 > v2) | ((v1 == v2) & (i1 < i2))
    return tl.where(first, v1, v2), tl.where(first, i1, i2)


@triton.jit
def _argmax_kernel(x_ptr, out_ptr, n_cols, sx0, sx1, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * sx0 + cols * sx1, mask=mask, other=-float("inf"))
    _, idx = tl.reduce((x, cols), 0, _pick)
    tl.store(out_ptr + row, idx.to(tl.int64))


def argmax_rows(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    out = torch.empty((rows,), dtype=torch.int64, device=x.device)
    block = triton.next_power_of_2(cols)
    _argmax_kernel[(rows,)](x, out, cols, x.stride(0), x.stride(1), BLOCK=block)
    return out
