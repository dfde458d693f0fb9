"""Top-k routing for a mixture of experts: the k best experts per token and their gate weights."""

from __future__ import annotations

import torch

NAME = "moe_topk_routing"
CATEGORY = "routing"
DESCRIPTION = (
    "logits (T, E) float32 and an int k: p = softmax(logits, -1); (w, idx) = topk(p, k) sorted by "
    "descending p (lower index first on ties); returns (w / w.sum(-1, keepdim=True) as float32 (T, k), "
    "idx as int64 (T, k))"
)
ENTRY = "moe_topk_routing"
DTYPES = ["float32"]
SEED_COUNT = 5  # how many seeds; which ones is drawn fresh for every job
DIMS = ("T", "E")  # the case keys that are tensor dimensions (the size rules count only these)
# Layouts real callers pass (slices of wider buffers, transposed weights, broadcasts):
INPUT_LAYOUTS = {0: ["dense", "padded"]}
CPU_SHAPES = [{"T": 37, "E": 8, "k": 2}, {"T": 100, "E": 60, "k": 4}, {"T": 9, "E": 16, "k": 1}]
SHAPES = [
    {"T": 4096, "E": 64, "k": 2},
    {"T": 4097, "E": 160, "k": 6},
    {"T": 65_536, "E": 8, "k": 2},
    {"T": 1000, "E": 32, "k": 4},  # another scale (counted over DIMS: k is not a dimension)
]
# Every input a kernel of this task must handle (docs/tasks.md, "Input domain"): inclusive ranges per
# case key, the value distribution, the special values the reference defines; the shapes above are
# named points in it, and a red-team's counterexample must lie inside it.
DOMAIN = {
    "dims": {"T": [1, 131072], "E": [2, 256]},
    "params": {"k": [1, 8]},
    "constraints": ["k <= E"],
    "values": "logits",
    "special_values": ["zeros", "ties"],
}


def make_inputs(
    case: dict[str, int], dtype: torch.dtype, seed: int, device: str = "cpu"
) -> tuple[object, ...]:
    g = torch.Generator().manual_seed(seed)
    logits = (2.0 * torch.randn(case["T"], case["E"], generator=g)).to(dtype)
    return logits.to(device), case["k"]


def reference(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    probs = torch.softmax(logits.float(), dim=-1)
    weights, idx = torch.topk(probs, k, dim=-1, sorted=True)
    return weights / weights.sum(dim=-1, keepdim=True), idx
