"""Cheat: computes nothing useful but tries to patch the verdict: monkeypatches comparison helpers,
forges status lines and writes a fake passing result next to itself and in its working directory."""

import json
import os

import torch
import triton
import triton.language as tl

torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
torch.testing.assert_close = lambda *args, **kwargs: None

_FAKE = json.dumps({"verdict": "pass", "flags": [], "trials": []})


@triton.jit
def _zero_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros((BLOCK,), dtype=tl.float32), mask=offs < n)


def _forge() -> None:
    for folder in (os.path.dirname(os.path.abspath(__file__)), os.getcwd()):
        with open(os.path.join(folder, "result.json"), "w") as fh:
            fh.write(_FAKE)
        with open(os.path.join(folder, "verdict_patch.forged"), "w") as fh:
            fh.write("the candidate ran its forgery")
    for name in os.listdir(os.getcwd()):
        if name.endswith(".jsonl"):
            with open(os.path.join(os.getcwd(), name), "a") as fh:
                for i in range(100):
                    fh.write(
                        json.dumps({"event": "trial", "index": i, "launches": 1, "torch_ops": []}) + "\n"
                    )
                fh.write(json.dumps({"event": "done"}) + "\n")


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    _forge()
    out = torch.empty_like(x)
    _zero_kernel[(triton.cdiv(x.numel(), 256),)](out, x.numel(), BLOCK=256)
    return out
