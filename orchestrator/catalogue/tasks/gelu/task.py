"""GELU, tanh approximation: out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""

from __future__ import annotations

import torch

NAME = "gelu"
CATEGORY = "activation"
DESCRIPTION = (
    "out = gelu(x, approximate='tanh') elementwise for a 1-D x, computed in float32 and rounded to x's "
    "dtype (tanh: build it from exp; libdevice is not available on the cpu pool)"
)
ENTRY = "gelu"
DTYPES = ["float32", "float16"]
SEEDS = [0, 1, 2, 3, 4]
# Two lengths that are not block multiples, one far smaller than any block (another scale).
CPU_SHAPES = [{"n": 1000}, {"n": 3001}, {"n": 37}]
SHAPES = [{"n": 98_765}, {"n": 1_000_003}, {"n": 16_777_216}]


def make_inputs(
    case: dict[str, int], dtype: torch.dtype, seed: int, device: str = "cpu"
) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    # Scaled so that both tails (large negative and large positive inputs) are exercised.
    x = (4.0 * torch.randn(case["n"], generator=g)).to(dtype)
    return (x.to(device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x.float(), approximate="tanh").to(x.dtype)
