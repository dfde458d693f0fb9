"""Honest: row maxima and minima, returned as a namedtuple (as `torch.aminmax` returns one)."""

from collections import namedtuple

import torch
import triton
import triton.language as tl

MaxMin = namedtuple("MaxMin", ["max", "min"])


@triton.jit
def _max_min_kernel(x_ptr, max_ptr, min_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    hi = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    lo = tl.load(x_ptr + row * stride + cols, mask=mask, other=float("inf"))
    tl.store(max_ptr + row, tl.max(hi, axis=0))
    tl.store(min_ptr + row, tl.min(lo, axis=0))


def row_max_min(x: torch.Tensor) -> MaxMin:
    rows, cols = x.shape
    hi = torch.empty((rows,), dtype=x.dtype, device=x.device)
    lo = torch.empty((rows,), dtype=x.dtype, device=x.device)
    _max_min_kernel[(rows,)](x, hi, lo, cols, x.stride(0), BLOCK=triton.next_power_of_2(cols))
    return MaxMin(hi, lo)
