"""2-D transpose into a fresh contiguous tensor: out[j, i] = x[i, j]."""

from __future__ import annotations

import torch

NAME = "transpose2d"
CATEGORY = "memory"
DESCRIPTION = (
    "out = x.T as a new contiguous (N, M) tensor for a 2-D x (M, N); a view of x is not an answer "
    "(outputs must not alias inputs)"
)
ENTRY = "transpose2d"
DTYPES = ["float32", "float16"]
SEED_COUNT = 5  # how many seeds; which ones is drawn fresh for every job
DIMS = ("M", "N")  # the case keys that are tensor dimensions (the size rules count only these)
# Layouts real callers pass (slices of wider buffers, transposed weights, broadcasts):
INPUT_LAYOUTS = {0: ["dense", "padded", "offset"]}
CPU_SHAPES = [{"M": 33, "N": 47}, {"M": 70, "N": 45}, {"M": 128, "N": 96}]
SHAPES = [{"M": 1000, "N": 1000}, {"M": 4097, "N": 513}, {"M": 8192, "N": 8192}]
# Every input a kernel of this task must handle (docs/tasks.md, "Input domain"): inclusive ranges per
# case key, the value distribution, the special values the reference defines; the shapes above are
# named points in it, and a red-team's counterexample must lie inside it.
DOMAIN = {
    "dims": {"M": [1, 16384], "N": [1, 16384]},
    "values": "normal",
    "special_values": ["zeros"],
}


def make_inputs(
    case: dict[str, int], dtype: torch.dtype, seed: int, device: str = "cpu"
) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(case["M"], case["N"], generator=g).to(dtype).to(device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return x.t().contiguous()
