"""Test probe (not a cheat): the first of two candidates forked from one zygote. At import it plants
state for the next one (a module attribute, a variable, a sys.modules entry, files in its working
directory and home, some of them read-only), starts a daemon in a session of its own that outlives
it, and writes into every socket it holds (the zygote's control socket, if it had it). Then it adds
honestly. Run with the static gate advisory."""

import json
import os
import sys
import time
import types

import torch
import triton
import triton.language as tl

OUT = "__OUT__"


def _plant() -> dict:
    torch.planted_by_a = True
    os.environ["PLANTED_BY_A"] = "1"
    sys.modules["planted_by_a"] = types.ModuleType("planted_by_a")
    for folder in (os.getcwd(), os.environ["HOME"]):
        with open(os.path.join(folder, "planted_by_a"), "w") as fh:
            fh.write("a was here")
        locked = os.path.join(folder, ".triton", "cache", "locked")
        os.makedirs(locked)
        with open(os.path.join(locked, "kernel.json"), "w") as fh:
            fh.write("{}")
        os.chmod(locked, 0o500)
    written = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
            if target.startswith("socket:"):
                os.write(int(name), json.dumps({"op": "fork"}).encode())
                written.append(target)
        except OSError:
            continue
    return {"sockets_written": written}


def _daemon() -> int:
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(ready_w, str(os.getpid()).encode())
            for fd in range(3, 1024):
                try:
                    os.close(fd)
                except OSError:
                    pass
            time.sleep(300)
        os._exit(0)
    os.close(ready_w)
    os.waitpid(pid, 0)
    daemon = int(os.read(ready_r, 64))
    os.close(ready_r)
    return daemon


_SEEN = {**_plant(), "daemon": _daemon(), "pid": os.getpid(), "ppid": os.getppid()}


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
