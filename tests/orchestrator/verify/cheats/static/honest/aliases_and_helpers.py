"""Honest add written with aliases and small helpers: `import torch as t`, `from triton import language`,
a config dataclass, a cached block-size helper, typing annotations and a launching helper."""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from typing import Final

import torch as t
import triton
from triton import language as lang

_join = os.path.join
_MAX_BLOCK: Final[int] = 1024


@dataclass(frozen=True)
class _Launch:
    block: int
    warps: int = 4


@functools.lru_cache(maxsize=64)
def _plan(n: int) -> _Launch:
    block = max(64, min(_MAX_BLOCK, 2 ** math.ceil(math.log2(max(n, 1)))))
    return _Launch(block=block, warps=4 if block < 1024 else 8)


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: lang.constexpr):
    offs = lang.program_id(0) * BLOCK + lang.arange(0, BLOCK)
    mask = offs < n
    lang.store(
        out_ptr + offs, lang.load(x_ptr + offs, mask=mask) + lang.load(y_ptr + offs, mask=mask), mask=mask
    )


def _launch(x: t.Tensor, y: t.Tensor, out: t.Tensor, plan: _Launch) -> None:
    kernel = _add_kernel
    n = x.numel()
    kernel[(triton.cdiv(n, plan.block),)](x, y, out, n, BLOCK=plan.block, num_warps=plan.warps)


def add(x: t.Tensor, y: t.Tensor, out: t.Tensor | None = None) -> t.Tensor:
    assert x.shape == y.shape and x.dtype == y.dtype, "same shape and dtype"
    if not isinstance(x, t.Tensor) or (len(x.shape) == 0 and x.numel() != 1):
        raise TypeError("x must be a tensor")
    x = x.contiguous()
    y = y.contiguous()
    result = t.empty_like(x) if out is None else out
    with t.no_grad():
        _launch(x, y, result, _plan(x.numel()))
    return result
