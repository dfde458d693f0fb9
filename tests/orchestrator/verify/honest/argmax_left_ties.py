"""Honest row argmax: tie_break_left=True returns the first of equal maxima, as the reference does."""

import torch
import triton
import triton.language as tl


@triton.jit
def _argmax_kernel(x_ptr, out_ptr, n_cols, sx0, sx1, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * sx0 + cols * sx1, mask=mask, other=-float("inf"))
    idx = tl.argmax(x, 0, tie_break_left=True)
    tl.store(out_ptr + row, idx.to(tl.int64))


def argmax_rows(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    out = torch.empty((rows,), dtype=torch.int64, device=x.device)
    block = triton.next_power_of_2(cols)
    _argmax_kernel[(rows,)](x, out, cols, x.stride(0), x.stride(1), BLOCK=block)
    return out
