"""Cheat: in the cpu pool the kernel body is plain Python over numpy arrays (`.handle.data`), and a
global dict keeps state between programs. It passes the interpreter and is no kernel at all."""

import torch
import triton
import triton.language as tl

_SEEN = {}


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    _SEEN[0] = x.handle.data.sum()
    tl.store(out_ptr + offs, x + y, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    _add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
