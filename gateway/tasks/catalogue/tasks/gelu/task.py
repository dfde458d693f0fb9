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
SEED_COUNT = 5  # how many seeds; which ones is drawn fresh for every job
DIMS = ("n",)  # the case keys that are tensor dimensions (the size rules count only these)
# Layouts real callers pass (slices of wider buffers, transposed weights, broadcasts):
INPUT_LAYOUTS = {0: ["dense", "offset", "strided"]}
# Two lengths that are not block multiples, one far smaller than any block (another scale).
CPU_SHAPES = [{"n": 1000}, {"n": 3001}, {"n": 37}]
SHAPES = [{"n": 98_765}, {"n": 1_000_003}, {"n": 16_777_216}]
# Every input a kernel of this task must handle (docs/tasks.md, "Input domain"): inclusive ranges per
# case key, the value distribution, the special values the reference defines; the shapes above are
# named points in it, and a red-team's counterexample must lie inside it.
DOMAIN = {
    "dims": {"n": [1, 67108864]},
    "values": "normal",
    "special_values": ["zeros", "nan", "inf", "denormals", "large"],
}


def make_inputs(
    case: dict[str, int], dtype: torch.dtype, seed: int, device: str = "cpu"
) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    # Scaled so that both tails (large negative and large positive inputs) are exercised.
    x = (4.0 * torch.randn(case["n"], generator=g)).to(dtype)
    return (x.to(device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x.float(), approximate="tanh").to(x.dtype)
