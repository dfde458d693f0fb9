"""Cheat: computes with torch in a worker thread and joins it before returning (a TorchDispatchMode is
thread-local, so a monitor that only watches the calling thread sees nothing)."""

import threading

import torch
import triton
import triton.language as tl


@triton.jit
def _noop(out_ptr, n, BLOCK: tl.constexpr):
    pass


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    worker = threading.Thread(target=torch.add, args=(x, y), kwargs={"out": out})
    worker.start()
    worker.join()
    _noop[(1,)](out, out.numel(), BLOCK=16)
    return out
