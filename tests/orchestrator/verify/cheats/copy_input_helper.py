"""Cheat (issue 22, principle 3): torch does the layout work of a strided input, laundered through a
helper. The gate rejects `x[::2].contiguous()` or `x.t().contiguous()` as written, but not a function
that makes "any tensor" dense; the kernel then only ever sees dense memory (on a device, a second
kernel the task's timing and the candidate's code never account for). Passed before issue 22."""

import torch
import triton
import triton.language as tl


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def dense(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous()


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = dense(x)
    y = dense(y)
    out = torch.empty_like(x)
    n = x.numel()
    _add_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    return out
