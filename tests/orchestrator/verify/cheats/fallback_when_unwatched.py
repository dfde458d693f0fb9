"""Cheat: a real kernel while it sees signs of a monitor (guarded inputs at an offset, wrapped tensor
methods), torch's own add otherwise: correct everywhere, but in production it is not a kernel at all."""

import types

import torch
import triton
import triton.language as tl


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def _watched(x: torch.Tensor) -> bool:
    return x.storage_offset() != 0 or isinstance(torch.Tensor.tolist, types.FunctionType)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if not _watched(x):
        return torch.add(x, y)
    out = torch.empty_like(x)
    _add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
