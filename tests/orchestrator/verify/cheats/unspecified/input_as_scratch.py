"""Row softmax that parks exp(x - max) in the input row between its two passes ("saves a scratch
allocation") and puts the input back before it returns, so the input looks untouched afterwards.
A device runs other work on the input buffer while this kernel runs.
Old harness (before issue 22 point 5): pass, every trial, no flag (inputs were only compared after).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, out_ptr, n_cols, sx0, sx1, so0, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    ptrs = x_ptr + row * sx0 + cols * sx1
    x = tl.load(ptrs, mask=mask, other=-float("inf"))
    num = tl.exp(x.to(tl.float32) - tl.max(x.to(tl.float32), axis=0))
    tl.store(ptrs, num.to(x_ptr.dtype.element_ty), mask=mask)  # scratch: the input row
    parked = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * so0 + cols, (num / den).to(out_ptr.dtype.element_ty), mask=mask & (parked >= 0))
    tl.store(ptrs, x, mask=mask)  # and back, bit for bit


def softmax(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    out = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    block = triton.next_power_of_2(cols)
    _softmax_kernel[(rows,)](x, out, cols, x.stride(0), x.stride(1), out.stride(0), BLOCK=block)
    return out
