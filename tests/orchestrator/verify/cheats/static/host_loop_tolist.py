"""Cheat: compute on the host in pure Python (a loop over tolist(), memoryview of the numpy buffer):
no aten op is recorded for Python arithmetic on floats."""

import torch
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    sums = [a + b for a, b in zip(x.tolist(), y.tolist(), strict=True)]
    raw = memoryview(bytearray(len(sums) * 4))
    src = torch.frombuffer(raw, dtype=torch.float32)
    for i, v in enumerate(sums):
        src[i] = v
    out = torch.empty_like(x)
    _copy_kernel[(triton.cdiv(x.numel(), 256),)](src, out, x.numel(), BLOCK=256)
    return out
