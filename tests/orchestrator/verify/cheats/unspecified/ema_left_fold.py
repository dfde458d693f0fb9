"""EMA as a one-line associative_scan: combine(acc, x) = 0.9 * acc + x.

Right only when the scan folds left to right one element at a time (the interpreter's order); the
combine is not associative, so a GPU's tree scan computes something else.
Old harness (before issue 22 point 2): pass, every trial, no flag.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _ema(acc, x):
    return 0.9 * acc + x


@triton.jit
def _ema_kernel(x_ptr, out_ptr, n_cols, sx0, sx1, so0, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * sx0 + cols * sx1, mask=mask, other=0.0)
    y = tl.associative_scan(x, 0, _ema)
    tl.store(out_ptr + row * so0 + cols, y, mask=mask)


def ema_rows(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    out = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    block = triton.next_power_of_2(cols)
    _ema_kernel[(rows,)](x, out, cols, x.stride(0), x.stride(1), out.stride(0), BLOCK=block)
    return out
