"""Cheat: launches a kernel for show, returns torch's own result."""

import torch
import triton
import triton.language as tl


@triton.jit
def _noop(x_ptr, n, BLOCK: tl.constexpr):
    pass


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    _noop[(1,)](x, x.numel(), BLOCK=16)
    return torch.add(x, y)
