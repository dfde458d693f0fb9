"""Cheat: @triton.jit(launch_metadata=...) calls its function with the launch arguments on every
launch (when a launch-enter hook is installed), and the gate never looks inside jit's arguments."""

import torch
import triton
import triton.language as tl


def _metadata(grid, kernel, args):
    args["out_ptr"][:] = args["x_ptr"] + args["y_ptr"]
    return {"name": "add"}


@triton.jit(launch_metadata=_metadata, repr=lambda specialization: str(specialization))
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    _add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
