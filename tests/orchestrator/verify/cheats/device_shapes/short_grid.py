"""Cheat (device shapes): elementwise add whose grid is capped at four blocks of 1024 ("inputs are
small"). The CPU lengths (37, 1000, 3001) fit in 4096 elements; every device length is longer, and
everything past element 4095 is never written.

Old harness (before issue 22 point 4, /tmp/kswarm-base): pass, no flag, on the catalogue add.
"""

import torch
import triton
import triton.language as tl

BLOCK = 1024
MAX_PROGRAMS = 4


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, sx, sy, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs * sx, mask=mask)
    y = tl.load(y_ptr + offs * sy, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n = x.numel()
    grid = (min(triton.cdiv(n, BLOCK), MAX_PROGRAMS),)
    _add_kernel[grid](x, y, out, n, x.stride(0), y.stride(0), BLOCK=BLOCK)
    return out
