"""Row-wise softmax over the last dimension of a 2-D tensor."""

from __future__ import annotations

import torch

NAME = "softmax"
DESCRIPTION = "out = softmax(x, dim=-1) for a 2-D x; same dtype as x"
ENTRY = "softmax"
DTYPES = ["float32", "float16"]
SEED_COUNT = 5  # which seeds is drawn fresh for every job
DIMS = ("rows", "cols")
INPUT_LAYOUTS = {0: ["dense", "padded", "offset"]}
CPU_SHAPES = [{"rows": 7, "cols": 33}, {"rows": 13, "cols": 100}, {"rows": 24, "cols": 1000}]
SHAPES = [
    {"rows": 1000, "cols": 1000},
    {"rows": 4097, "cols": 513},
    {"rows": 123, "cols": 8191},
    {"rows": 32768, "cols": 1024},
]


def make_inputs(
    case: dict[str, int], dtype: torch.dtype, seed: int, device: str = "cpu"
) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    x = (3.0 * torch.randn(case["rows"], case["cols"], generator=g)).to(dtype)
    return (x.to(device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)
