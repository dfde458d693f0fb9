"""Test probe (not a cheat): at import, tries to read the memory of the process that forked it (the
zygote) and of that one's parent (the harness, which holds the references) through /proc/<pid>/mem,
searching it for the references (NEEDLES, filled in by the test); as a control it searches its own
memory for a marker of its own. Writes what happened to OUT, then adds honestly. Run as a user
without CAP_SYS_PTRACE, with the static gate advisory."""

import json
import os
import re

import torch
import triton
import triton.language as tl

OUT = "__OUT__"
NEEDLES = [bytes.fromhex(value) for value in json.loads("""__NEEDLES__""").values()]
MARKER = ("own-memory-marker-" + os.urandom(8).hex()).encode()


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return int(next(line for line in fh if line.startswith("PPid:")).split()[1])


def _search(pid: int, needles: list[bytes]) -> str:
    try:
        with open(f"/proc/{pid}/maps") as fh:
            maps = fh.read()
        found = 0
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            for line in maps.splitlines():
                match = re.match(r"([0-9a-f]+)-([0-9a-f]+) rw", line)
                if not match:
                    continue
                start, end = int(match[1], 16), int(match[2], 16)
                try:
                    mem.seek(start)
                    data = mem.read(end - start)
                except OSError:
                    continue
                found += sum(1 for needle in needles if needle in data)
        return f"read: {found} found"
    except OSError as exc:
        return f"refused: {type(exc).__name__}"


_ZYGOTE = os.getppid()
_SEEN = {
    "self": _search(os.getpid(), [MARKER]),
    "zygote": _search(_ZYGOTE, NEEDLES),
    "harness": _search(_parent(_ZYGOTE), NEEDLES),
}
with open(OUT, "w") as _fh:
    _fh.write(json.dumps(_SEEN))


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    _add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
