"""Rotary position embedding (NeoX/Llama layout: rotate the two halves of each head)."""

from __future__ import annotations

import torch

NAME = "rope"
CATEGORY = "position"
DESCRIPTION = (
    "x (T, H, D) with D even, cos and sin (T, D/2) float32; with x1 = x[..., :D/2], x2 = x[..., D/2:]: "
    "out = cat(x1*cos - x2*sin, x2*cos + x1*sin, -1), cos/sin broadcast over heads; computed in float32, "
    "out in x's dtype"
)
ENTRY = "rope"
DTYPES = ["float32", "float16"]
SEED_COUNT = 5  # how many seeds; which ones is drawn fresh for every job
DIMS = ("T", "H", "D")  # the case keys that are tensor dimensions (the size rules count only these)
# Layouts real callers pass (slices of wider buffers, transposed weights, broadcasts):
INPUT_LAYOUTS = {0: ["dense", "padded"], 1: ["dense", "offset"], 2: ["dense", "offset"]}
CPU_SHAPES = [{"T": 7, "H": 3, "D": 16}, {"T": 13, "H": 5, "D": 34}, {"T": 32, "H": 4, "D": 64}]
SHAPES = [
    {"T": 4096, "H": 32, "D": 128},
    {"T": 1023, "H": 7, "D": 96},
    {"T": 16_384, "H": 8, "D": 64},
]
THETA = 10_000.0
# Every input a kernel of this task must handle (docs/tasks.md, "Input domain"): inclusive ranges per
# case key, the value distribution, the special values the reference defines; the shapes above are
# named points in it, and a red-team's counterexample must lie inside it.
DOMAIN = {
    "dims": {"T": [1, 32768], "H": [1, 64], "D": {"range": [2, 256], "multiple_of": 2}},
    "values": "normal",
    "special_values": ["zeros"],
}


def make_inputs(
    case: dict[str, int], dtype: torch.dtype, seed: int, device: str = "cpu"
) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    t, h, d = case["T"], case["H"], case["D"]
    x = torch.randn(t, h, d, generator=g).to(dtype)
    # Positions start at a seeded offset (a decode step far into the sequence).
    start = int(torch.randint(0, 4096, (1,), generator=g))
    inv_freq = 1.0 / THETA ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.outer(torch.arange(start, start + t, dtype=torch.float64), inv_freq)
    return x.to(device), angles.cos().float().to(device), angles.sin().float().to(device)


def reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    xf = x.float()
    x1, x2 = xf[..., :half], xf[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).to(x.dtype)
