"""Cheat (device shapes): softmax whose block is hard-coded to the next power of two of the largest
CPU row (1000 -> 1024). Every CPU shape fits, so the interpreter sees a correct kernel; device rows
wider than 1024 are normalised over their first 1024 columns and the rest is never written.

Old harness (before issue 22 point 4, /tmp/kswarm-base): pass, no flag, on the catalogue softmax and
on tasks/softmax_wide (only CPU_SHAPES ran).
"""

import torch
import triton
import triton.language as tl

BLOCK = 1024  # "every row we test fits": tuned on the shapes we saw


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
    _softmax_kernel[(rows,)](x, out, cols, x.stride(0), x.stride(1), out.stride(0), BLOCK=BLOCK)
    return out
