"""Test probe (not a cheat): at import, starts a daemon in a session of its own (its pid written to OUT)
and then kills -- or, with SIGNAL "stop", stops -- the process that forked it (the fork server's
zygote), so that nobody is left to sweep the daemon or to vouch for an exit status. Then it adds
honestly. Run with the static gate advisory."""

import os
import signal
import time

import torch
import triton
import triton.language as tl

OUT = "__OUT__"
SIGNAL = "__SIGNAL__"


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
            time.sleep(600)
        os._exit(0)
    os.close(ready_w)
    os.waitpid(pid, 0)
    daemon = int(os.read(ready_r, 64))
    os.close(ready_r)
    return daemon


with open(OUT, "w") as _fh:
    _fh.write(str(_daemon()))
os.kill(os.getppid(), signal.SIGSTOP if SIGNAL == "stop" else signal.SIGKILL)


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    _add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
