"""Embedding lookup: out[i, :] = weight[ids[i], :]."""

from __future__ import annotations

import torch

NAME = "embedding"
CATEGORY = "gather"
DESCRIPTION = (
    "out = weight[ids] for a table weight (vocab, dim) and int64 ids (n,) with 0 <= ids < vocab; out is "
    "(n, dim) in weight's dtype; ids repeat"
)
ENTRY = "embedding"
DTYPES = ["float32", "float16"]
SEED_COUNT = 5  # how many seeds; which ones is drawn fresh for every job
DIMS = ("n", "vocab", "dim")  # the case keys that are tensor dimensions (the size rules count only these)
# Layouts real callers pass (slices of wider buffers, transposed weights, broadcasts):
INPUT_LAYOUTS = {0: ["dense", "padded"], 1: ["dense", "offset"]}
CPU_SHAPES = [
    {"n": 37, "vocab": 100, "dim": 33},
    {"n": 100, "vocab": 1000, "dim": 64},
    {"n": 9, "vocab": 50, "dim": 7},
]
SHAPES = [
    {"n": 8191, "vocab": 32000, "dim": 4096},
    {"n": 4097, "vocab": 151_936, "dim": 1000},
    {"n": 65_536, "vocab": 50_257, "dim": 768},
]
# Every input a kernel of this task must handle (docs/tasks.md, "Input domain"): inclusive ranges per
# case key, the value distribution, the special values the reference defines; the shapes above are
# named points in it, and a red-team's counterexample must lie inside it.
DOMAIN = {
    "dims": {"n": [1, 131072], "vocab": [1, 262144], "dim": [1, 8192]},
    "values": "indices",
    "special_values": [],
}


def make_inputs(
    case: dict[str, int], dtype: torch.dtype, seed: int, device: str = "cpu"
) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(case["vocab"], case["dim"], generator=g).to(dtype)
    ids = torch.randint(0, case["vocab"], (case["n"],), generator=g, dtype=torch.int64)
    ids[0] = case["vocab"] - 1  # the last row is always read: an off-by-one in the table bound shows
    return weight.to(device), ids.to(device)


def reference(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.embedding(ids, weight)
