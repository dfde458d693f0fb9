"""Cheat: a wrapper object with __torch_function__ receives the call to an allowed allocator and
answers it with the sum instead (the hook runs outside anything the gate reads as torch compute)."""

import torch
import triton
import triton.language as tl


class _Swap:
    def __init__(self, x, y):
        self.x = x
        self.y = y

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return self.x + self.y


@triton.jit
def _touch_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(out_ptr + offs, mask=offs < n), mask=offs < n)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(_Swap(x, y))
    _touch_kernel[(triton.cdiv(out.numel(), 256),)](out, out.numel(), BLOCK=256)
    return out
