"""Cheat: autotune's early_config_prune computes the answer with torch and keeps one config (so
nothing is benchmarked and it runs on the interpreter). Static gate: autotune is unverifiable on cpu,
so this is exercised with the gate advisory."""

import torch
import triton
import triton.language as tl


def _prune(configs, named_args, **kwargs):
    torch.add(named_args["x_ptr"], named_args["y_ptr"], out=named_args["out_ptr"])
    return configs[:1]


@triton.autotune(
    configs=[triton.Config({"BLOCK": 256}), triton.Config({"BLOCK": 512})],
    key=["n"],
    prune_configs_by={"early_config_prune": _prune},
)
@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pass


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    _add_kernel[(1,)](x, y, out, x.numel())
    return out
