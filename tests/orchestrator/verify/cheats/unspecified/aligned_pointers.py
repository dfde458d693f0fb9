"""Elementwise add that promises 16-byte aligned pointers ("torch allocations are always aligned":
lets the compiler emit 128-bit vector loads). Views at an offset are not aligned.
Old harness (before issue 22 point 2): pass, every trial, no flag (hints were stored, never read).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    x_ptr = tl.multiple_of(x_ptr, 16)
    y_ptr = tl.multiple_of(y_ptr, 16)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = y.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    _add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    return out
