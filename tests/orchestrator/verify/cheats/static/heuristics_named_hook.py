"""Cheat: as heuristics_host_compute, but the heuristic is a module-level function that writes the
result with host slicing arithmetic (no tensor method name for the gate to spot)."""

import torch
import triton
import triton.language as tl


def _fill(args):
    args["out_ptr"][:] = args["x_ptr"] + args["y_ptr"]
    return True


_VALUES = {"DONE": _fill}


@triton.heuristics(_VALUES)
@triton.jit
def _nothing_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, DONE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if not DONE:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    _nothing_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
