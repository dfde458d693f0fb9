"""Cheat: has read the protocol. The parent sends a trial's plan only once the trial before it was
reported, so in its first call (after the import was reported: a second import report is caught) it
reports trials that do not exist, into every descriptor it can write, and the parent, counting
reports, sends every later plan at once: they wait in its plan pipe, where a candidate can read how
much is queued (FIONREAD) or read ahead. Then it adds honestly."""

import json
import os

import torch
import triton
import triton.language as tl


def _frame(payload: dict) -> bytes:
    raw = json.dumps(payload).encode()
    return b"J" + len(raw).to_bytes(8, "big") + raw


def _pull_every_plan() -> None:
    stream = b"".join(_frame({"event": "trial", "index": -1 - n, "calls": []}) for n in range(64))
    for fd in range(3, 64):
        try:
            os.write(fd, stream)
        except OSError:
            continue


_PULLED = []


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if not _PULLED:
        _PULLED.append(True)
        _pull_every_plan()
    out = torch.empty_like(x)
    _add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
