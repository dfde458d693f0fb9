"""Matrix multiply with a bias and a ReLU epilogue: out = relu(a @ b + bias)."""

from __future__ import annotations

import torch

NAME = "matmul_bias_relu"
CATEGORY = "matmul"
DESCRIPTION = (
    "out = relu(a @ b + bias) for a (M, K), b (K, N) and bias (N,) of the same dtype; out is (M, N) in "
    "that dtype, accumulated in float32 with the bias and ReLU applied before rounding"
)
ENTRY = "matmul_bias_relu"
DTYPES = ["float32", "float16"]
SEED_COUNT = 5  # how many seeds; which ones is drawn fresh for every job
DIMS = ("M", "N", "K")  # the case keys that are tensor dimensions (the size rules count only these)
# Layouts real callers pass (slices of wider buffers, transposed weights, broadcasts):
INPUT_LAYOUTS = {0: ["dense", "padded"], 1: ["dense", "transposed"]}
CPU_SHAPES = [{"M": 33, "N": 47, "K": 29}, {"M": 70, "N": 45, "K": 19}, {"M": 5, "N": 3, "K": 7}]
SHAPES = [
    {"M": 1000, "N": 1000, "K": 1000},
    {"M": 1023, "N": 517, "K": 333},
    {"M": 4096, "N": 4096, "K": 4096},
]
# Every input a kernel of this task must handle (docs/tasks.md, "Input domain"): inclusive ranges per
# case key, the value distribution, the special values the reference defines; the shapes above are
# named points in it, and a red-team's counterexample must lie inside it.
DOMAIN = {
    "dims": {"M": [1, 8192], "N": [1, 8192], "K": [1, 8192]},
    "values": "normal",
    "special_values": ["zeros"],
}


def make_inputs(
    case: dict[str, int], dtype: torch.dtype, seed: int, device: str = "cpu"
) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(case["M"], case["K"], generator=g).to(dtype)
    b = torch.randn(case["K"], case["N"], generator=g).to(dtype)
    bias = torch.randn(case["N"], generator=g).to(dtype)
    return a.to(device), b.to(device), bias.to(device)


def reference(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.relu(a.float() @ b.float() + bias.float()).to(a.dtype)
