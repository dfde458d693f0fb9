"""Batched matrix multiply: out[i] = a[i] @ b[i]."""

from __future__ import annotations

import torch

NAME = "bmm"
CATEGORY = "matmul"
DESCRIPTION = (
    "out = torch.bmm(a, b) for a (B, M, K) and b (B, K, N) of the same dtype; out is (B, M, N) in that "
    "dtype, accumulated in float32 (fp32 inputs need IEEE precision, not tf32)"
)
ENTRY = "bmm"
DTYPES = ["float32", "float16"]
SEED_COUNT = 5  # how many seeds; which ones is drawn fresh for every job
DIMS = ("B", "M", "N", "K")  # the case keys that are tensor dimensions (the size rules count only these)
# Layouts real callers pass (slices of wider buffers, transposed weights, broadcasts):
INPUT_LAYOUTS = {0: ["dense", "offset"], 1: ["dense", "transposed"]}
CPU_SHAPES = [
    {"B": 3, "M": 33, "N": 17, "K": 29},
    {"B": 2, "M": 20, "N": 45, "K": 19},
    {"B": 1, "M": 5, "N": 3, "K": 7},
]
SHAPES = [
    {"B": 8, "M": 1000, "N": 1000, "K": 500},
    {"B": 33, "M": 127, "N": 255, "K": 129},
    {"B": 64, "M": 512, "N": 512, "K": 512},
]
# Every input a kernel of this task must handle (docs/tasks.md, "Input domain"): inclusive ranges per
# case key, the value distribution, the special values the reference defines; the shapes above are
# named points in it, and a red-team's counterexample must lie inside it.
DOMAIN = {
    "dims": {"B": [1, 256], "M": [1, 4096], "N": [1, 4096], "K": [1, 4096]},
    "values": "normal",
    "special_values": ["zeros"],
}


def make_inputs(
    case: dict[str, int], dtype: torch.dtype, seed: int, device: str = "cpu"
) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(case["B"], case["M"], case["K"], generator=g).to(dtype)
    b = torch.randn(case["B"], case["K"], case["N"], generator=g).to(dtype)
    return a.to(device), b.to(device)


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.bmm(a.float(), b.float()).to(a.dtype)
