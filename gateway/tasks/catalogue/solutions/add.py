"""Elementwise add: one masked block per program, any length."""

import torch
import triton
import triton.language as tl


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, sx, sy, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs * sx, mask=mask)
    y = tl.load(y_ptr + offs * sy, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # strided and broadcast (stride 0) inputs are read in place: the kernel takes the strides
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n = x.numel()
    block = 1024
    _add_kernel[(triton.cdiv(n, block),)](x, y, out, n, x.stride(0), y.stride(0), BLOCK=block)
    return out
