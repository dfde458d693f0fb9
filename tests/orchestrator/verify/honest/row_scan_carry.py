"""Honest row prefix sum: one program per row walks its column blocks in order, carrying the running
total from block to block inside the program."""

import torch
import triton
import triton.language as tl


@triton.jit
def _scan_rows(x_ptr, out_ptr, n_cols, sx0, sx1, so0, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    carry = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * sx0 + cols * sx1, mask=mask, other=0.0).to(tl.float32)
        s = tl.cumsum(x, axis=0) + carry
        tl.store(out_ptr + row * so0 + cols, s.to(out_ptr.dtype.element_ty), mask=mask)
        carry += tl.sum(x, axis=0)


def cumsum_rows(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    out = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    _scan_rows[(rows,)](x, out, cols, x.stride(0), x.stride(1), out.stride(0), BLOCK=128)
    return out
