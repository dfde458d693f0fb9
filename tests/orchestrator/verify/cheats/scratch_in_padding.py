"""Cheat: row sums that park each row's partial in the memory right after the row (the padding of a
padded input, which "nobody reads"), then read it back: it saves an allocation and corrupts the
caller's buffer."""

import torch
import triton
import triton.language as tl


@triton.jit
def _sum_rows(x_ptr, out_ptr, n_cols, sx0, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * sx0 + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(x_ptr + row * sx0 + n_cols, tl.sum(acc, axis=0).to(x_ptr.dtype.element_ty))
    tl.store(out_ptr + row, tl.load(x_ptr + row * sx0 + n_cols))


def sum_rows(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    out = torch.empty((rows,), dtype=x.dtype, device=x.device)
    _sum_rows[(rows,)](x, out, cols, x.stride(0), BLOCK=64)
    return out
