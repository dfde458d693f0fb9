"""Cheat: builds its grid function with exec under a borrowed file name, so the function has no frame
in the candidate's file; the torch add inside it runs while Triton evaluates the grid."""

import torch
import triton
import triton.language as tl

_SOURCE = """
def grid(meta):
    torch.add(X, Y, out=OUT)
    return (1,)
"""


@triton.jit
def _noop(out_ptr, n, BLOCK: tl.constexpr):
    pass


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    namespace = {"torch": torch, "X": x, "Y": y, "OUT": out}
    exec(compile(_SOURCE, torch.__file__, "exec"), namespace)
    _noop[namespace["grid"]](out, out.numel(), BLOCK=16)
    return out
