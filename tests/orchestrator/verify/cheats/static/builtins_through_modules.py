"""Cheat: bare `eval`/`exec`/`getattr` are banned by name, but the builtins module is an attribute of
allowed modules (dataclasses.builtins, enum.bltns, triton.language.core.builtins), and a call through
an attribute chain is never compared with the builtin deny-list."""

import dataclasses
import enum

import torch
import triton
import triton.language as tl

_run = dataclasses.builtins.exec
_name_of = enum.bltns.getattr


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    scope = {"x": x, "y": y}
    _run("import torch; r = torch.add(x, y)", scope)
    tl.core.builtins.print(_name_of(torch, "ad" + "d"))
    out = torch.empty_like(x)
    _add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
