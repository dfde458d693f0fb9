"""Test probe (not a cheat): records what a candidate can observe about its process, per call, into
the file named by OUT (filled in by the test), then adds honestly. Run with the static gate advisory."""

import json
import os
import sys

import torch
import triton
import triton.language as tl

OUT = "__OUT__"
WORDS = ("orchestrator", "kswarm", "verify", "harness")


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def _fds() -> dict[str, str]:
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            out[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
    return out


def _observe(x: torch.Tensor, fresh: torch.Tensor) -> dict:
    home = os.environ.get("HOME", "")
    with open("/proc/self/cmdline", "rb") as fh:
        cmdline = [part.decode() for part in fh.read().split(b"\0") if part]
    return {
        "argv": list(sys.argv),
        "orig_argv": list(getattr(sys, "orig_argv", [])),
        "cmdline": cmdline,
        "cwd": os.getcwd(),
        "cwd_list": sorted(os.listdir(os.getcwd())),
        "home": home,
        "home_list": sorted(os.listdir(home)) if home and os.path.isdir(home) else None,
        "env": dict(os.environ),
        "hash": hash("a probe's string"),
        "modules": sorted(m for m in sys.modules if any(w in m.lower() for w in WORDS)),
        "main_globals": sorted(vars(sys.modules["__main__"])),
        "path": list(sys.path),
        "fds": _fds(),
        "name": __name__,
        "dispatch_modes": torch._C._len_torch_dispatch_stack(),
        "fresh": {
            "offset": fresh.storage_offset(),
            "nbytes": fresh.untyped_storage().nbytes(),
            "needed": fresh.numel() * fresh.element_size(),
            "bits": fresh.view(torch.int32).tolist()[:2] if fresh.dtype == torch.float32 else None,
        },
        "input": {
            "offset": x.storage_offset(),
            "stride": list(x.stride()),
            "nbytes": x.untyped_storage().nbytes(),
        },
    }


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    seen = _observe(x, out)  # before the probe opens its own file
    with open(OUT, "a") as fh:
        fh.write(json.dumps(seen) + "\n")
    _add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
