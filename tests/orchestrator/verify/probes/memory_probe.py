"""Test probe (not a cheat): at every call, before computing, searches the process's memory (every
object the garbage collector tracks, every tensor's whole storage, every bytes object they hold) for
the parent's reference outputs and for the plans of trials, then adds honestly. NEEDLES (filled in by
the test) maps a name to the hex of the first bytes of one reference. Run with the static gate
advisory."""

import gc
import json

import torch
import triton
import triton.language as tl

OUT = "__OUT__"
NEEDLES = {name: bytes.fromhex(value) for name, value in json.loads("""__NEEDLES__""").items()}


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def _storage_bytes(t: torch.Tensor) -> bytes:
    raw = torch.empty((0,), dtype=torch.uint8).set_(t.untyped_storage())
    return raw.numpy().tobytes()


def _plan_index(obj: object) -> int | None:
    if type(obj).__name__ == "TrialPlan":
        return int(obj.index)
    if isinstance(obj, dict) and "calls" in obj and isinstance(obj.get("index"), int):
        return obj["index"]
    return None


def _search() -> dict:
    found: set[str] = set()
    plans: set[int] = set()
    blobs: list[bytes] = []
    for obj in gc.get_objects():
        index = _plan_index(obj)
        if index is not None:
            plans.add(index)
        if isinstance(obj, torch.Tensor) and obj.device.type == "cpu":
            blobs.append(_storage_bytes(obj))
        elif isinstance(obj, dict | list | tuple):
            items = obj.values() if isinstance(obj, dict) else obj
            blobs += [x for x in items if isinstance(x, bytes | bytearray) and len(x) >= 64]
            plans.update(i for x in items for i in [_plan_index(x)] if i is not None)
    for blob in blobs:
        found.update(name for name, needle in NEEDLES.items() if needle in blob)
    return {"needles": sorted(found), "plans": sorted(plans)}


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    seen = _search()  # before this call computes anything
    with open(OUT, "a") as fh:
        fh.write(json.dumps(seen) + "\n")
    out = torch.empty_like(x)
    _add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
