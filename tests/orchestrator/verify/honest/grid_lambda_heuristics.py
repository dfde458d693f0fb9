"""Honest add with the usual launcher idioms: a grid lambda over meta["BLOCK"] and a
@triton.heuristics block size; host-side callables that only compute integers."""

import torch
import triton
import triton.language as tl


@triton.heuristics(values={"BLOCK": lambda args: min(1024, triton.next_power_of_2(args["n"]))})
@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = y.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    _add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
    return out
