"""Bug/cheat that only a sequential interpreter accepts: a split row sum where every program adds its
partial into the output with a plain load + store (a lost-update race on a GPU; no atomics)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _split_sum(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    acc = tl.load(out_ptr + row)
    tl.store(out_ptr + row, acc + tl.sum(x, axis=0))


@triton.jit
def _cast(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(src_ptr + offs, mask=mask).to(out_ptr.dtype.element_ty), mask=mask)


def sum_rows(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    rows, cols = x.shape
    block = 32
    acc = torch.zeros((rows,), dtype=torch.float32, device=x.device)
    _split_sum[(rows, triton.cdiv(cols, block))](x, acc, cols, BLOCK=block)
    out = torch.empty((rows,), dtype=x.dtype, device=x.device)
    _cast[(triton.cdiv(rows, 64),)](acc, out, rows, BLOCK=64)
    return out
