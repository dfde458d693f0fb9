"""Honest add with a @triton.heuristics flag computed from integer arguments and a grid lambda that
reads the block size from the launch meta-parameters."""

import torch
import triton
import triton.language as tl


def _block_for(args) -> int:
    return min(1024, triton.next_power_of_2(args["n"]))


@triton.heuristics(
    {"BLOCK": _block_for, "EVEN": lambda args: args["n"] % args["BLOCK"] == 0 and args["n"] // 2 >= 0}
)
@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs))
    else:
        mask = offs < n
        tl.store(
            out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask
        )


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = y.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    _add_kernel[lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)](x, y, out, n)
    return out
