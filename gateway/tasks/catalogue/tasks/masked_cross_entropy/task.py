"""Masked mean cross-entropy, defined as 0 when the loss mask of the micro-batch is all zeros.

A real production NaN came from exactly that case: sum(ce * mask) / sum(mask) with sum(mask) == 0.
The reference defines the answer (0.0) and candidates must match it, NaN is a failure.
"""

from __future__ import annotations

import torch

NAME = "masked_cross_entropy"
CATEGORY = "loss"
DESCRIPTION = (
    "logits (N, V), int64 targets (N,), float32 mask (N,) of 0/1: ce[i] = logsumexp(logits[i]) - "
    "logits[i, targets[i]] in float32; out = sum(ce * mask) / sum(mask), and exactly 0.0 when "
    "sum(mask) == 0 (an all-masked micro-batch; never NaN); out is a 0-dim float32 tensor"
)
ENTRY = "masked_cross_entropy"
DTYPES = ["float32", "float16"]
SEED_COUNT = 5  # how many seeds; which ones is drawn fresh for every job
DIMS = ("N", "V")  # the case keys that are tensor dimensions (the size rules count only these)
# Layouts real callers pass (slices of wider buffers, transposed weights, broadcasts):
INPUT_LAYOUTS = {0: ["dense", "padded"]}
# zero_mask=1 marks a case whose mask is all zeros (the micro-batch the reference defines as 0).
CPU_SHAPES = [
    {"N": 37, "V": 100},
    {"N": 16, "V": 33, "zero_mask": 1},
    {"N": 64, "V": 500},
    {"N": 5, "V": 10},
]
SHAPES = [
    {"N": 8192, "V": 32_000},
    {"N": 4097, "V": 50_257, "zero_mask": 1},
    {"N": 1023, "V": 151_936},
    {"N": 4096, "V": 4096},
]
# Every input a kernel of this task must handle (docs/tasks.md, "Input domain"): inclusive ranges per
# case key, the value distribution, the special values the reference defines; the shapes above are
# named points in it, and a red-team's counterexample must lie inside it.
DOMAIN = {
    "dims": {"N": [1, 16384], "V": [2, 262144]},
    "params": {"zero_mask": [0, 1]},
    "values": "logits",
    "special_values": ["zeros", "large"],
}


def make_inputs(
    case: dict[str, int], dtype: torch.dtype, seed: int, device: str = "cpu"
) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    n, v = case["N"], case["V"]
    logits = (3.0 * torch.randn(n, v, generator=g)).to(dtype)
    targets = torch.randint(0, v, (n,), generator=g, dtype=torch.int64)
    if case.get("zero_mask"):
        mask = torch.zeros(n, dtype=torch.float32)
    else:
        mask = (torch.rand(n, generator=g) < 0.7).to(torch.float32)
        mask[0] = 1.0  # at least one counted row
    return logits.to(device), targets.to(device), mask.to(device)


def reference(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    ce = torch.nn.functional.cross_entropy(logits.float(), targets, reduction="none")
    den = mask.sum()
    loss = (ce * mask).sum() / den.clamp_min(1.0)
    return torch.where(den > 0, loss, torch.zeros_like(loss))
