"""Honest add with the usual launcher idioms: a grid lambda over meta["BLOCK"] and a
@triton.heuristics block size; host-side callables that only compute integers."""

import torch
import triton
import triton.language as tl


@triton.heuristics(values={"BLOCK": lambda args: min(1024, triton.next_power_of_2(args["n"]))})
@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, sx, sy, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs * sx, mask=mask)
    y = tl.load(y_ptr + offs * sy, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # strided and broadcast inputs are read in place (no host-side copy of an input)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n = x.numel()
    _add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n, x.stride(0), y.stride(0))
    return out
