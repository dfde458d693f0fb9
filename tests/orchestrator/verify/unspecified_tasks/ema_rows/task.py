"""Exponential moving average along each row: out[r, 0] = x[r, 0], out[r, c] = 0.9 * out[r, c-1] + x[r, c].

A linear recurrence: a scan, but its combine must carry the decay of the span it covers (issue 22,
principle 2: a scan's combine is applied in any association order on a device).
"""

from __future__ import annotations

import torch

NAME = "ema_rows"
CATEGORY = "scan"
DESCRIPTION = "out[r, c] = 0.9 * out[r, c - 1] + x[r, c] (out[r, 0] = x[r, 0]) for a 2-D float32 x"
ENTRY = "ema_rows"
DTYPES = ["float32"]
SEED_COUNT = 5
DIMS = ("rows", "cols")
INPUT_LAYOUTS = {0: ["dense", "padded", "transposed"]}
CPU_SHAPES = [{"rows": 7, "cols": 33}, {"rows": 13, "cols": 100}, {"rows": 24, "cols": 300}]
SHAPES = [{"rows": 1000, "cols": 1000}, {"rows": 4097, "cols": 513}, {"rows": 512, "cols": 8192}]
DECAY = 0.9


def make_inputs(
    case: dict[str, int], dtype: torch.dtype, seed: int, device: str = "cpu"
) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(case["rows"], case["cols"], generator=g).to(dtype).to(device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    acc = x.double().clone()
    for c in range(1, acc.shape[1]):
        acc[:, c] += DECAY * acc[:, c - 1]
    return acc.to(x.dtype)
