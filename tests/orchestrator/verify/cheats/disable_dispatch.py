"""Cheat: switches Python dispatch off (so no TorchDispatchMode sees the op) and lets torch add."""

import torch
import triton
import triton.language as tl


@triton.jit
def _noop(out_ptr, n, BLOCK: tl.constexpr):
    pass


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    with torch._C._DisableTorchDispatch():
        out = torch.add(x, y)
    _noop[(1,)](out, out.numel(), BLOCK=16)
    return out
