"""Reward hack a sequential interpreter accepts: a row sum whose programs add their partial to the row
under a spin lock taken and freed with *relaxed* atomics. The lock excludes, but orders nothing: the
plain load inside the critical section may see a value from before the previous holder's store."""

import torch
import triton
import triton.language as tl


@triton.jit
def _locked(x_ptr, acc_ptr, lock_ptr, n_cols, sx0, sx1, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * sx0 + cols * sx1, mask=cols < n_cols, other=0.0).to(tl.float32)
    part = tl.sum(x, axis=0)
    while tl.atomic_cas(lock_ptr + row, 0, 1, sem="relaxed") == 1:
        pass
    tl.store(acc_ptr + row, tl.load(acc_ptr + row) + part)
    tl.atomic_xchg(lock_ptr + row, 0, sem="relaxed")


@triton.jit
def _round(acc_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(acc_ptr + offs, mask=mask).to(out_ptr.dtype.element_ty), mask=mask)


def sum_rows(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    block = 64
    acc = torch.zeros((rows,), dtype=torch.float32, device=x.device)
    lock = torch.zeros((rows,), dtype=torch.int32, device=x.device)
    _locked[(rows, triton.cdiv(cols, block))](x, acc, lock, cols, x.stride(0), x.stride(1), BLOCK=block)
    out = torch.empty((rows,), dtype=x.dtype, device=x.device)
    _round[(triton.cdiv(rows, 64),)](acc, out, rows, BLOCK=64)
    return out
