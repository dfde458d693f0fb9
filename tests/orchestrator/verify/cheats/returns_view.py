"""Cheat: returns a view of a buffer it keeps (module state), so it can rewrite the caller's result
later; the values are right when returned."""

import torch
import triton
import triton.language as tl

_KEPT: list[torch.Tensor] = []


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    buf = torch.empty((1, x.numel()), dtype=x.dtype, device=x.device)
    _KEPT.append(buf)
    out = buf.view(-1)
    _add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
