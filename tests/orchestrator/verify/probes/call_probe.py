"""Test probe (not a cheat): what a candidate can measure about the call it is in, per call, into
the file named by OUT (filled in by the test), then adds honestly. Run with the static gate advisory.

It reads what plain Python offers without asking the monitor anything: how deep the stack is, which
functions called it, how much recursion headroom it has, and what its inputs and a fresh allocation
look like (offset in their storage, storage size, whether the fresh memory holds NaN)."""

import json
import sys

import torch
import triton
import triton.language as tl

OUT = "__OUT__"


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def _headroom(n: int = 0) -> int:
    try:
        return _headroom(n + 1)
    except RecursionError:
        return n


def _callers() -> list[str]:
    names, frame = [], sys._getframe(2)  # the entry's caller, outward
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return names


def _observe(x: torch.Tensor, fresh: torch.Tensor) -> dict:
    callers = _callers()
    return {
        "depth": len(callers),
        "callers": callers,
        "headroom": _headroom(),
        "fresh": [
            fresh.storage_offset(),
            fresh.untyped_storage().nbytes(),
            fresh.numel() * fresh.element_size(),
        ],
        "fresh_nan": bool(fresh.view(-1)[:1].isnan().any()) if fresh.numel() else None,
        "input": [x.storage_offset(), x.untyped_storage().nbytes(), x.numel() * x.element_size()],
    }


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    seen = _observe(x, out)
    with open(OUT, "a") as fh:
        fh.write(json.dumps(seen) + "\n")
    _add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
