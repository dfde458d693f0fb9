"""Honest row-wise cumulative sum: blocks of a row scanned in order, the running total carried."""

import torch
import triton
import triton.language as tl


@triton.jit
def _cumsum_rows_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    carry = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
        scanned = tl.cumsum(x, axis=0) + carry
        tl.store(out_ptr + row * stride + cols, scanned.to(out_ptr.dtype.element_ty), mask=mask)
        carry += tl.sum(x, axis=0)


def cumsum_rows(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    rows, cols = x.shape
    out = torch.empty_like(x)
    _cumsum_rows_kernel[(rows,)](x, out, cols, x.stride(0), BLOCK=min(512, triton.next_power_of_2(cols)))
    return out
