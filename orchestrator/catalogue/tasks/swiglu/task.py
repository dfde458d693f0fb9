"""SwiGLU gate: out = silu(gate) * up."""

from __future__ import annotations

import torch

NAME = "swiglu"
CATEGORY = "activation"
DESCRIPTION = (
    "out = silu(gate) * up elementwise; gate and up are 1-D tensors of the same length and dtype; "
    "computed in float32, rounded to that dtype"
)
ENTRY = "swiglu"
DTYPES = ["float32", "float16"]
SEEDS = [0, 1, 2, 3, 4]
# Two lengths that are not block multiples, one far smaller than any block (another scale).
CPU_SHAPES = [{"n": 1000}, {"n": 3001}, {"n": 37}]
SHAPES = [{"n": 98_765}, {"n": 1_000_003}, {"n": 16_777_216}]


def make_inputs(
    case: dict[str, int], dtype: torch.dtype, seed: int, device: str = "cpu"
) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    gate = (3.0 * torch.randn(case["n"], generator=g)).to(dtype)
    up = torch.randn(case["n"], generator=g).to(dtype)
    return gate.to(device), up.to(device)


def reference(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return (torch.nn.functional.silu(gate.float()) * up.float()).to(gate.dtype)
