"""Row-wise softmax with a masking bug (kept to show that the harness catches it).

The padded lanes of the last block load 0.0 instead of -inf, so every padded lane adds
exp(0 - max) to the denominator. Rows whose width is a power of two have no padding and come out
right; every other width is wrong by a few percent -- only a test on non-multiple sizes sees it.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, out_ptr, n_cols, x_stride, out_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_stride + cols, (num / den).to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    rows, cols = x.shape
    out = torch.empty_like(x)
    block = triton.next_power_of_2(cols)
    _softmax_kernel[(rows,)](x, out, cols, x.stride(0), out.stride(0), BLOCK=block)
    return out
