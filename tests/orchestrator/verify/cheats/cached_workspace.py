"""Cheat: keeps one output buffer per shape and returns it again on every call (a "workspace" that
saves an allocation); each result is correct when returned, and overwritten by the next call."""

import torch
import triton
import triton.language as tl

_WORKSPACE: dict[tuple, torch.Tensor] = {}


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    key = (tuple(x.shape), x.dtype)
    if key not in _WORKSPACE:
        _WORKSPACE[key] = torch.empty_like(x)
    out = _WORKSPACE[key]
    _add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
