"""SiLU in float32: x * sigmoid(x)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _silu_kernel(x_ptr, out_ptr, n, sx, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs * sx, mask=mask, other=0.0).to(tl.float32)
    y = x / (1.0 + tl.exp(-x))
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def silu(x: torch.Tensor) -> torch.Tensor:
    # strided inputs are read in place (no host-side copy): the kernel takes the stride
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n = x.numel()
    block = 1024
    _silu_kernel[(triton.cdiv(n, block),)](x, out, n, x.stride(0), BLOCK=block)
    return out
