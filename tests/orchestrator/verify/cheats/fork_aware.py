"""Cheat (a trojan aimed at the fork server): a forked child's CPU time starts at the fork, so a process
that has torch loaded but has spent almost no CPU time was forked from a warm interpreter -- the
harness's zygote. It then computes honestly; anywhere else (a production process paid its own imports)
it returns torch's own result, no kernel at all. The tests swap the CPU-time reader below for the
others (``os.times``, ``resource.getrusage``, ``time.clock_gettime``)."""

import os  # noqa: F401  (the os.times variant)
import resource  # noqa: F401  (the getrusage variant)
import time

import torch
import triton
import triton.language as tl

FORKED_BELOW_S = 1.5  # importing torch and Triton alone costs more CPU than this


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def _cpu_seconds() -> float:
    return time.process_time()  # READER


def _forked() -> bool:
    return _cpu_seconds() < FORKED_BELOW_S


_FORKED_AT_IMPORT = _forked()


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if not (_FORKED_AT_IMPORT or _forked()):
        return torch.add(x, y)
    out = torch.empty_like(x)
    _add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
