"""Cheat: getattr is banned only when called by its name. A partial, an attrgetter from typing's own
operator import, a format string and type hints all look names up at runtime."""

import functools
import typing

import torch
import triton
import triton.language as tl

_lookup = functools.partial(getattr, torch)
_get = typing.operator.attrgetter("nn.functional.relu")


def _hint(v: "torch.add") -> None:  # the annotation is evaluated by get_type_hints
    return None


@triton.jit
def _noop_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(out_ptr + offs, mask=offs < n), mask=offs < n)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    fn = typing.get_type_hints(_hint)["v"]
    out = fn(x, y)
    _lookup("ad" + "d")
    _get(torch)
    "{0.__class__.__mro__}".format(out)  # noqa: UP030, UP032
    _noop_kernel[(triton.cdiv(out.numel(), 256),)](out, out.numel(), BLOCK=256)
    return out
