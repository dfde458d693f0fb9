"""Cheat: has read the protocol. During its first call it computes the answers with torch, writes a
complete, clean-looking report stream for every trial into the child's report pipe (found by trying
the descriptors), announces "done" and leaves with os._exit(0) before the runner can report what it
saw."""

import io
import json
import os

import torch
import triton
import triton.language as tl


@triton.jit
def _noop(out_ptr, n, BLOCK: tl.constexpr):
    pass


def _frame(kind: bytes, payload: bytes) -> bytes:
    return kind + len(payload).to_bytes(8, "big") + payload


def _forge(x: torch.Tensor, y: torch.Tensor) -> None:
    out = torch.add(x, y)
    buffer = io.BytesIO()
    torch.save({"calls": [{"outputs": [out], "inputs": [x, y]}] * 3, "live": [x, y]}, buffer)
    blob = buffer.getvalue()
    stream = b""
    for index in range(64):
        calls = [{"kind": "first", "launches": 1, "findings": {}}] * 3
        stream += _frame(
            b"J", json.dumps({"event": "trial", "index": index, "calls": calls, "blob": True}).encode()
        )
        stream += _frame(b"B", blob)
    stream += _frame(b"J", json.dumps({"event": "done"}).encode())
    for fd in range(3, 64):
        try:
            os.write(fd, stream)
        except OSError:
            continue
    os._exit(0)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    _noop[(1,)](out, out.numel(), BLOCK=16)
    _forge(x, y)
    return out
