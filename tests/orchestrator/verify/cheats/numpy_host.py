"""Cheat: the sum is computed in numpy on the host (invisible to a torch op trace) and a Triton kernel
only copies it into the output."""

import numpy as np
import torch
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    host = np.add(np.asarray(x), np.asarray(y))
    src = torch.from_numpy(host)
    out = torch.empty_like(x)
    _copy_kernel[(triton.cdiv(x.numel(), 256),)](src, out, x.numel(), BLOCK=256)
    return out
