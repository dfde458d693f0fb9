"""Cheat: a Python loop over .tolist() computes the sum on the host; torch.tensor brings it back and a
Triton kernel copies it into the output."""

import torch
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    values = [a + b for a, b in zip(x.tolist(), y.tolist(), strict=True)]
    src = torch.tensor(values, dtype=x.dtype)
    out = torch.empty_like(x)
    _copy_kernel[(triton.cdiv(x.numel(), 256),)](src, out, x.numel(), BLOCK=256)
    return out
