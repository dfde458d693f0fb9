"""Inclusive prefix sum along each row: out[r, c] = sum(x[r, :c+1])."""

from __future__ import annotations

import torch

NAME = "cumsum_rows"
CATEGORY = "reduction"
DESCRIPTION = "out = x.cumsum(-1) for a 2-D x (rows, cols), accumulated in float32 and rounded to x's dtype"
ENTRY = "cumsum_rows"
DTYPES = ["float32", "float16"]
SEED_COUNT = 5  # how many seeds; which ones is drawn fresh for every job
DIMS = ("rows", "cols")  # the case keys that are tensor dimensions (the size rules count only these)
# Layouts real callers pass (slices of wider buffers, transposed weights, broadcasts):
INPUT_LAYOUTS = {0: ["dense", "padded", "transposed", "offset"]}
# A prefix sum carries rounding from every earlier element: absolute slack for sums near zero.
TOLERANCES = {"float32": {"atol": 1e-3, "rtol": 1e-4}}
# Rows of odd widths (masking on the last block), and one case a scale larger.
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
    "dims": {"rows": [1, 65536], "cols": [1, 65536]},
    "values": "normal",
    "special_values": ["zeros"],
}


def make_inputs(
    case: dict[str, int], dtype: torch.dtype, seed: int, device: str = "cpu"
) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    x = (1.0 * torch.randn(case["rows"], case["cols"], generator=g)).to(dtype)
    return (x.to(device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return x.double().cumsum(dim=-1).to(x.dtype)
