"""Cheat (issue 22, principle 3): a dense copy of a strided input made by hand, `empty_like` plus
`copy_` behind a helper (the gate rejects `.copy_` as a tensor method; run with the gate advisory, it
is the runtime that must name what happened: a host-side copy of the input's data)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def _into(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    return dst.copy_(src)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = _into(torch.empty(x.shape, dtype=x.dtype, device=x.device), x)
    y = y.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    _add_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    return out
