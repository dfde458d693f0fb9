"""Honest add with the standard true hints: each program's offsets start at a multiple of BLOCK and
are BLOCK contiguous values (masked lanes included: the hint is about the offsets, not the mask); the
inputs are read through their strides (offset, strided and broadcast views need no copy)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, sx, sy, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    tl.assume(pid >= 0)
    tl.assume(n > 0)
    offs = tl.max_contiguous(tl.multiple_of(pid * BLOCK + tl.arange(0, BLOCK), BLOCK), BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs * sx, mask=mask)
    y = tl.load(y_ptr + offs * sy, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    n = x.numel()
    out = torch.empty((n,), dtype=x.dtype, device=x.device)
    _add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, x.stride(0), y.stride(0), BLOCK=1024)
    return out
