"""Layer normalisation over the last dimension, with weight and bias (eps = 1e-5)."""

from __future__ import annotations

import torch

NAME = "layernorm"
CATEGORY = "normalization"
DESCRIPTION = (
    "out = layer_norm(x, (cols,), weight, bias, eps=1e-5) for a 2-D x (rows, cols) and 1-D weight, bias "
    "(cols,); statistics in float32 (biased variance), out in x's dtype"
)
ENTRY = "layernorm"
EPS = 1e-5
DTYPES = ["float32", "float16"]
SEED_COUNT = 5  # how many seeds; which ones is drawn fresh for every job
DIMS = ("rows", "cols")  # the case keys that are tensor dimensions (the size rules count only these)
# Layouts real callers pass (slices of wider buffers, transposed weights, broadcasts):
INPUT_LAYOUTS = {0: ["dense", "padded", "offset"]}
CPU_SHAPES = [{"rows": 7, "cols": 33}, {"rows": 13, "cols": 100}, {"rows": 24, "cols": 1000}]
SHAPES = [
    {"rows": 1000, "cols": 1000},
    {"rows": 4097, "cols": 513},
    {"rows": 123, "cols": 8191},
    {"rows": 32768, "cols": 1024},
]
# Every input a kernel of this task must handle (docs/tasks.md, "Input domain"): inclusive ranges per
# case key, the value distribution, the special values the reference defines; the shapes above are
# named points in it, and a red-team's counterexample must lie inside it.
DOMAIN = {
    "dims": {"rows": [1, 65536], "cols": [1, 16384]},
    "values": "normal",
    "special_values": ["zeros", "large"],
}


def make_inputs(
    case: dict[str, int], dtype: torch.dtype, seed: int, device: str = "cpu"
) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    rows, cols = case["rows"], case["cols"]
    # An offset mean and a non-unit scale: a kernel that skips centring or scaling fails.
    x = (2.0 * torch.randn(rows, cols, generator=g) + 0.5).to(dtype)
    weight = (1.0 + 0.1 * torch.randn(cols, generator=g)).to(dtype)
    bias = (0.1 * torch.randn(cols, generator=g)).to(dtype)
    return x.to(device), weight.to(device), bias.to(device)


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    out = torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), weight.float(), bias.float(), EPS)
    return out.to(x.dtype)
