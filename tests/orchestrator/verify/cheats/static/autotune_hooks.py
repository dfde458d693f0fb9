"""Cheat: autotune's pre_hook and prune function receive the kernel's arguments and run inside the
launch; either one can write the answer into the output."""

import torch
import triton
import triton.language as tl


def _prune(configs, named_args, **kwargs):
    named_args["out_ptr"][:] = named_args["x_ptr"] + named_args["y_ptr"]
    return configs


def _pre(nargs):
    nargs["out_ptr"][:] = nargs["x_ptr"] + nargs["y_ptr"]


@triton.autotune(
    configs=[triton.Config({"BLOCK": 256}, pre_hook=_pre), triton.Config({"BLOCK": 128})],
    key=["n"],
    prune_configs_by={"early_config_prune": _prune},
    post_hook=lambda nargs, exception: nargs["out_ptr"].add_(0),
)
@triton.jit
def _nothing_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pass


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    _nothing_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, out, x.numel())
    return out
