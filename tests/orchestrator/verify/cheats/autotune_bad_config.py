"""Cheat (issue 22, principle 7): an autotuned add with one config that is wrong -- it shifts its
stores by one element -- next to a right one. On a GPU whichever config benchmarks fastest is kept,
so the wrong one ships wherever it wins. The old harness answered `unverifiable` on cpu (autotune
needed a device driver) and never ran either config; now every config runs under the interpreter
(its stray stores are out of bounds) and each call draws the kept config anew."""

import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"BLOCK": 128, "SHIFT": 0}), triton.Config({"BLOCK": 256, "SHIFT": 1})],
    key=["n"],
)
@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, SHIFT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    value = tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs + SHIFT, value, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    _add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
    return out
