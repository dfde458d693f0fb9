"""Bug/cheat that only a sequential interpreter accepts: a one-pass cumulative sum over rows where each
program reads the running total the previous program left in a scratch buffer (no synchronisation:
on a GPU the previous program may not have run yet)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _chained_cumsum(x_ptr, out_ptr, carry_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    col = tl.program_id(1)
    cols = col * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    prev = tl.load(carry_ptr + row * (tl.num_programs(1) + 1) + col)
    s = tl.cumsum(x, axis=0) + prev
    tl.store(out_ptr + row * n_cols + cols, s.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(carry_ptr + row * (tl.num_programs(1) + 1) + col + 1, prev + tl.sum(x, axis=0))


def cumsum_rows(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    rows, cols = x.shape
    block = 16
    blocks = triton.cdiv(cols, block)
    out = torch.empty_like(x)
    carry = torch.zeros((rows, blocks + 1), dtype=torch.float32, device=x.device)
    _chained_cumsum[(rows, blocks)](x, out, carry, cols, BLOCK=block)
    return out
