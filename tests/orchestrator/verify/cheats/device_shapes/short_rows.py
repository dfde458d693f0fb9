"""Cheat (device shapes): softmax whose grid is capped at 4096 programs, one row each ("no task has
more rows than that"). The CPU shapes have at most 24 rows; device rows past 4096 are never written.

Old harness (before issue 22 point 4, /tmp/kswarm-base): pass, no flag, on the catalogue softmax and
on tasks/softmax_tall (only CPU_SHAPES ran).
"""

import torch
import triton
import triton.language as tl

MAX_ROWS = 4096


@triton.jit
def _softmax_kernel(x_ptr, out_ptr, n_cols, x_row_stride, x_col_stride, out_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols * x_col_stride, mask=mask, other=-float("inf"))
    x = x.to(tl.float32)
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_stride + cols, (num / den).to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    out = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    block = triton.next_power_of_2(cols)
    grid = (min(rows, MAX_ROWS),)
    _softmax_kernel[grid](x, out, cols, x.stride(0), x.stride(1), out.stride(0), BLOCK=block)
    return out
