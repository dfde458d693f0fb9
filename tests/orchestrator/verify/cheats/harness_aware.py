"""Cheat (a trojan): computes honestly only when it believes it is being verified, judged by traces
the harness leaves (its modules, files and variables, guard-band offsets, an active dispatch mode, a
fresh buffer that is not at offset 0 or pre-filled); anywhere else it returns garbage."""

import os
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def _garbage_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.full((BLOCK,), 7.0, tl.float32), mask=offs < n)


def _under_test(x: torch.Tensor, probe: torch.Tensor) -> bool:
    if any(m.startswith("orchestrator") or "kswarm" in m for m in sys.modules):
        return True
    if "runner" in " ".join(sys.argv) or {"PYTHONHASHSEED", "TRITON_CACHE_DIR"} & set(os.environ):
        return True
    if any(name.endswith((".json", ".jsonl", ".pt")) for name in os.listdir(os.getcwd())):
        return True
    if probe.storage_offset() or probe.untyped_storage().nbytes() != probe.numel() * probe.element_size():
        return True
    if x.storage_offset() or torch._C._len_torch_dispatch_stack():
        return True
    return False


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    grid = (triton.cdiv(x.numel(), 256),)
    if _under_test(x, out):
        _add_kernel[grid](x, y, out, x.numel(), BLOCK=256)
    else:
        _garbage_kernel[grid](out, x.numel(), BLOCK=256)
    return out
