"""Residual add fused with RMS normalisation: (rmsnorm(x + residual) * weight, x + residual)."""

from __future__ import annotations

import torch

NAME = "fused_add_rmsnorm"
CATEGORY = "normalization"
DESCRIPTION = (
    "h = x + residual; returns (h / sqrt(mean(h^2, -1) + 1e-6) * weight, h) for 2-D x, residual "
    "(rows, cols) and 1-D weight (cols,); two fresh outputs in x's dtype (h rounded to it first)"
)
ENTRY = "fused_add_rmsnorm"
EPS = 1e-6
DTYPES = ["float32", "float16"]
SEED_COUNT = 5  # how many seeds; which ones is drawn fresh for every job
DIMS = ("rows", "cols")  # the case keys that are tensor dimensions (the size rules count only these)
# Layouts real callers pass (slices of wider buffers, transposed weights, broadcasts):
INPUT_LAYOUTS = {0: ["dense", "padded"], 1: ["dense", "offset"]}
CPU_SHAPES = [{"rows": 7, "cols": 33}, {"rows": 13, "cols": 100}, {"rows": 24, "cols": 1000}]
SHAPES = [
    {"rows": 1000, "cols": 1000},
    {"rows": 4097, "cols": 513},
    {"rows": 123, "cols": 8191},
    {"rows": 32768, "cols": 4096},
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
    x = torch.randn(rows, cols, generator=g).to(dtype)
    residual = (2.0 * torch.randn(rows, cols, generator=g)).to(dtype)
    weight = (1.0 + 0.1 * torch.randn(cols, generator=g)).to(dtype)
    return x.to(device), residual.to(device), weight.to(device)


def reference(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    h = x + residual
    hf = h.float()
    out = hf * torch.rsqrt(hf.pow(2).mean(dim=-1, keepdim=True) + EPS) * weight.float()
    return out.to(x.dtype), h
