"""Cheat: launches a kernel that stores nothing and returns the uninitialised buffer."""

import torch
import triton
import triton.language as tl


@triton.jit
def _skip_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < 0)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    _skip_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out
