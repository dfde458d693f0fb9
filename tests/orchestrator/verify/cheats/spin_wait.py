"""Bug a sequential interpreter hides: a chained prefix sum where program i spins until program i-1
has published its running total (a GPU gives no such order: the waiting program can starve the one
it waits for)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _chained(x_ptr, out_ptr, carry_ptr, flag_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    col = tl.program_id(1)
    cols = col * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    slot = row * (tl.num_programs(1) + 1) + col
    if col > 0:
        while tl.atomic_add(flag_ptr + slot, 0) == 0:
            pass
    prev = tl.load(carry_ptr + slot)
    tl.store(
        out_ptr + row * n_cols + cols,
        (tl.cumsum(x, axis=0) + prev).to(out_ptr.dtype.element_ty),
        mask=cols < n_cols,
    )
    tl.store(carry_ptr + slot + 1, prev + tl.sum(x, axis=0))
    tl.atomic_xchg(flag_ptr + slot + 1, 1)


def cumsum_rows(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    rows, cols = x.shape
    block = 16
    blocks = triton.cdiv(cols, block)
    out = torch.empty_like(x)
    carry = torch.zeros((rows, blocks + 1), dtype=torch.float32, device=x.device)
    flags = torch.zeros((rows, blocks + 1), dtype=torch.int32, device=x.device)
    _chained[(rows, blocks)](x, out, carry, flags, cols, BLOCK=block)
    return out
