"""Honest two-pass reduction: per-block partial sums into a scratch buffer, then one program sums them."""

import torch
import triton
import triton.language as tl


@triton.jit
def _partial_kernel(x_ptr, part_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(part_ptr + pid, tl.sum(x, axis=0))


@triton.jit
def _final_kernel(part_ptr, out_ptr, parts, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, parts, BLOCK):
        idx = start + tl.arange(0, BLOCK)
        acc += tl.load(part_ptr + idx, mask=idx < parts, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


def total(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous().view(-1)
    n = x.numel()
    block = 1024
    parts = triton.cdiv(n, block)
    partial = torch.empty((parts,), dtype=torch.float32, device=x.device)
    out = torch.empty((), dtype=x.dtype, device=x.device)
    _partial_kernel[(parts,)](x, partial, n, BLOCK=block)
    _final_kernel[(1,)](partial, out, parts, BLOCK=min(1024, triton.next_power_of_2(parts)))
    return out
