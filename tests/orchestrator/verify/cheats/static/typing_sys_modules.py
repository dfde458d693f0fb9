"""Cheat: typing imports sys, and typing is allowed. Through sys.modules the candidate reaches the
monitor's module and replaces its handler with a pass-through, then computes with an aten overload
it reaches as data (no tensor method is ever *called* by a name the gate knows)."""

import typing

import torch
import triton
import triton.language as tl


@triton.jit
def _touch_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(out_ptr + offs, mask=offs < n), mask=offs < n)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    mods = typing.sys.modules
    monitor = mods.get("orchestrator.verify.monitor")
    if monitor is not None:
        monitor.Monitor.handle = lambda self, func, args, kwargs: func(*args, **kwargs)
    aten = mods["torch"].ops.aten
    out = aten.add.Tensor(x, y)
    _touch_kernel[(triton.cdiv(out.numel(), 256),)](out, out.numel(), BLOCK=256)
    return out
