"""Row-wise softmax without the max subtraction (kept to show the red team breaking a merged kernel).

Masking and strides are right, so every test drawn from ordinary values passes: 3 * randn never
reaches exp's overflow. On large logits (the task's domain declares the special value ``large``),
exp(x) overflows to inf and inf / inf is NaN -- only an input with large magnitudes sees it.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, out_ptr, n_cols, x_row_stride, x_col_stride, out_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols * x_col_stride, mask=mask, other=-float("inf"))
    num = tl.exp(x.to(tl.float32))
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_stride + cols, (num / den).to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    out = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    block = triton.next_power_of_2(cols)
    _softmax_kernel[(rows,)](x, out, cols, x.stride(0), x.stride(1), out.stride(0), BLOCK=block)
    return out
