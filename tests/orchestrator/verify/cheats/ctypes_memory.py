"""Cheat: reads the inputs through their data pointers with ctypes, adds them in Python and writes the
output the same way; a no-op kernel is launched for show."""

import ctypes
import struct

import torch
import triton
import triton.language as tl


@triton.jit
def _noop(out_ptr, n, BLOCK: tl.constexpr):
    pass


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    size = x.element_size()
    fmt = "f" if size == 4 else "e"
    raw = ctypes.c_char * (n * size)
    xs = bytes(raw.from_address(x.data_ptr()))
    ys = bytes(raw.from_address(y.data_ptr()))
    sums = [
        a + b for a, b in zip(struct.unpack(f"{n}{fmt}", xs), struct.unpack(f"{n}{fmt}", ys), strict=True)
    ]
    ctypes.memmove(out.data_ptr(), struct.pack(f"{n}{fmt}", *sums), n * size)
    _noop[(1,)](out, n, BLOCK=16)
    return out
