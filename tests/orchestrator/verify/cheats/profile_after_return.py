"""Cheat: returns an unwritten buffer and installs a profile hook that fills it with torch after the
call has returned (once the monitor has stopped watching), then removes itself."""

import sys

import torch
import triton
import triton.language as tl


@triton.jit
def _noop(out_ptr, n, BLOCK: tl.constexpr):
    pass


def _later(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor):
    state = {"armed": 2}

    def hook(frame, event, arg):
        if event == "return" and frame.f_code.co_name == "add":
            state["armed"] = 1
        elif state["armed"] == 1 and event == "call" and torch._C._len_torch_dispatch_stack() == 0:
            sys.setprofile(None)
            torch.add(x, y, out=out)

    return hook


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    _noop[(1,)](out, out.numel(), BLOCK=16)
    sys.setprofile(_later(x, y, out))
    return out
