"""Test probe (not a cheat): the second of two candidates forked from one zygote. At import it looks
for everything the first one planted (planter.py) and records what it finds. Then it adds honestly.
Run with the static gate advisory."""

import json
import os
import sys

import torch
import triton
import triton.language as tl

OUT = "__OUT__"


def _listing(folder: str) -> list[str]:
    walk = os.walk(folder)
    return sorted(os.path.relpath(os.path.join(d, f), folder) for d, ds, fs in walk for f in ds + fs)


def _fds() -> dict[str, str]:
    out = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            out[name] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
    return out


_SEEN = {
    "torch_attribute": hasattr(torch, "planted_by_a"),
    "variable": "PLANTED_BY_A" in os.environ,
    "module": "planted_by_a" in sys.modules,
    "cwd": _listing(os.getcwd()),
    "home": _listing(os.environ["HOME"]),
    "fds": _fds(),
    "pid": os.getpid(),
    "ppid": os.getppid(),
}


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    fresh = {"offset": out.storage_offset(), "bits": out.view(torch.int32).tolist()[:2]}
    with open(OUT, "a") as fh:
        fh.write(json.dumps({**_SEEN, "fresh": fresh}) + "\n")
    _add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
