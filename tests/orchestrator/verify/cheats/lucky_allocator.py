"""Cheat: relu that stores only the positive lanes (and the first block, which the allocator's free
list scribbles on) and relies on the rest of the output being zero: the buffer is allocated while a
launch is in progress (never filled by today's monitor) right after freeing a zeroed one of the same
size, so the allocator hands back zeros."""

import torch
import triton
import triton.language as tl


@triton.jit
def _relu_positive_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask & ((x > 0) | (offs < 64)))


def _allocating_grid(x: torch.Tensor, box: list):
    def grid(meta):
        scratch = torch.zeros_like(x)
        del scratch
        box.append(torch.empty_like(x))
        return (1,)

    return grid


@triton.jit
def _noop(x_ptr, BLOCK: tl.constexpr):
    pass


def relu(x: torch.Tensor) -> torch.Tensor:
    box: list = []
    _noop[_allocating_grid(x, box)](x, BLOCK=256)
    out = box[0]
    _relu_positive_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out
