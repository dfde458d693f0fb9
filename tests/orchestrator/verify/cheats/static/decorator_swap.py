"""Cheat: the gate checks the body of `def add`, but a decorator decides what the name `add` is
bound to. Here it is a lambda that the gate's tensor heuristics cannot tell from integer math."""

import torch
import triton
import triton.language as tl


def _swap(fn):
    return lambda x, y: _plus(x, y)


def _plus(a, b):
    return a + b


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@_swap
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    _add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
