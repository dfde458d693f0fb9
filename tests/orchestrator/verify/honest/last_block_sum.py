"""Honest "last block finishes" row sum (the threadfence-reduction pattern): every program stores its
partial, then takes a ticket with an atomic add; the program that draws the last ticket reads all
partials and writes the result. Correct on a GPU thanks to the atomic's acquire/release ordering
(its default ``sem``): the cpu pool runs the programs interleaved and finds every partial read
ordered after its store by that release/acquire chain, so this passes (with ``sem="relaxed"`` it is a
race: cheats/atomics/relaxed_last_block.py)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _last_block(
    x_ptr, part_ptr, count_ptr, out_ptr, n_cols, sx0, sx1, n_blocks, BLOCK: tl.constexpr, P: tl.constexpr
):
    row = tl.program_id(0)
    blk = tl.program_id(1)
    cols = blk * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * sx0 + cols * sx1, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(part_ptr + row * n_blocks + blk, tl.sum(x, axis=0))
    ticket = tl.atomic_add(count_ptr + row, 1)
    if ticket == n_blocks - 1:
        idx = tl.arange(0, P)
        p = tl.load(part_ptr + row * n_blocks + idx, mask=idx < n_blocks, other=0.0)
        tl.store(out_ptr + row, tl.sum(p, axis=0).to(out_ptr.dtype.element_ty))


def sum_rows(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    block = 256
    blocks = triton.cdiv(cols, block)
    part = torch.empty((rows, blocks), dtype=torch.float32, device=x.device)
    count = torch.zeros((rows,), dtype=torch.int32, device=x.device)
    out = torch.empty((rows,), dtype=x.dtype, device=x.device)
    grid = (rows, blocks)
    _last_block[grid](
        x,
        part,
        count,
        out,
        cols,
        x.stride(0),
        x.stride(1),
        blocks,
        BLOCK=block,
        P=triton.next_power_of_2(blocks),
    )
    return out
