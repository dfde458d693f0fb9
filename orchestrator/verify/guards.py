"""Guard bands and allocation sentinels, shared by the child (which lays them out) and the parent
(which checks them on the tensors the child saved).

A guarded tensor lives in one storage ``front | data | back``: both bands hold the job's canary byte
and the tensor starts at ``storage_offset == front``. Band sizes, the canary byte and the sentinels
poured into fresh allocations are drawn from the OS for every job (``draw_guard_params``) and sent to
the child over its private pipe, so no value is stable from one job to the next. Band sizes are a
function of the allocation's size only, so the parent can recover an allocation's layout from the
saved storage alone (``allocation_of``), without trusting anything the child says.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

GUARD_QUANTUM = 256  # bytes: the data start is as aligned as the allocation (Triton specialises on 16)
MAX_GUARD_BYTES = 16 << 20

_FLOAT_BITS = {"float64": 64, "float32": 32, "float16": 16, "bfloat16": 16}
_MANTISSA = {"float64": 52, "float32": 23, "float16": 10, "bfloat16": 7}
_INT_VIEW = {64: torch.int64, 32: torch.int32, 16: torch.int16}
_INT_RANGES = {
    "int8": (-128, 127),
    "uint8": (0, 255),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}


def _round_up(value: int, quantum: int) -> int:
    return -(-value // quantum) * quantum


def _signed(bits: int, width: int) -> int:
    return bits - (1 << width) if bits >= 1 << (width - 1) else bits


def _nan_bits(name: str, rng: secrets.SystemRandom) -> int:
    """A quiet NaN with a random sign and payload: never equal to a computed value, never finite."""
    width, mant = _FLOAT_BITS[name], _MANTISSA[name]
    exponent = ((1 << (width - 1 - mant)) - 1) << mant
    payload = rng.randrange(1, 1 << (mant - 1)) | (1 << (mant - 1))
    return _signed((rng.randrange(2) << (width - 1)) | exponent | payload, width)


@dataclass(frozen=True)
class GuardParams:
    """One job's private layout parameters (never written where the child could read them early)."""

    canary: int
    front_min: int  # bytes
    back_min: int  # bytes
    sentinels: Mapping[str, int] = field(default_factory=dict)  # dtype name -> bit pattern / value

    def front(self, nbytes: int) -> int:
        return min(_round_up(max(nbytes, self.front_min), GUARD_QUANTUM), MAX_GUARD_BYTES)

    def back(self, nbytes: int) -> int:
        return min(_round_up(max(nbytes, self.back_min), GUARD_QUANTUM), MAX_GUARD_BYTES)

    def total(self, nbytes: int) -> int:
        return self.front(nbytes) + nbytes + self.back(nbytes)

    def to_json(self) -> dict[str, Any]:
        return {
            "canary": self.canary,
            "front_min": self.front_min,
            "back_min": self.back_min,
            "sentinels": dict(self.sentinels),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> GuardParams:
        return cls(
            canary=int(raw["canary"]),
            front_min=int(raw["front_min"]),
            back_min=int(raw["back_min"]),
            sentinels={str(k): int(v) for k, v in dict(raw["sentinels"]).items()},
        )


def draw_guard_params() -> GuardParams:
    rng = secrets.SystemRandom()
    sentinels: dict[str, int] = {name: _nan_bits(name, rng) for name in _FLOAT_BITS}
    for name, (lo, hi) in _INT_RANGES.items():
        # far from any index or count a kernel could produce, where the type has room for that
        span = (hi - lo) // 4
        sentinels[name] = rng.choice((lo + rng.randrange(span), hi - rng.randrange(span)))
    sentinels["bool"] = rng.randrange(2, 256)  # a byte that is neither False (0) nor True (1)
    return GuardParams(
        canary=rng.randrange(1, 255),
        front_min=GUARD_QUANTUM * rng.randrange(8, 129),
        back_min=GUARD_QUANTUM * rng.randrange(8, 129),
        sentinels=sentinels,
    )


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def storage_span(size: Sequence[int], stride: Sequence[int]) -> int:
    """Elements a (size, stride) view touches, counted from its first element."""
    if any(s == 0 for s in size):
        return 0
    return 1 + sum((s - 1) * abs(st) for s, st in zip(size, stride, strict=True))


def contiguous_strides(size: Sequence[int]) -> tuple[int, ...]:
    strides: list[int] = []
    acc = 1
    for s in reversed(size):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def guarded_storage(
    nbytes: int, device: torch.device | str, params: GuardParams | None
) -> tuple[torch.Tensor, int]:
    """(raw uint8 buffer, front band in bytes): ``params=None`` is a plain, unguarded allocation."""
    if params is None:
        return torch.empty((nbytes,), dtype=torch.uint8, device=device), 0
    raw = torch.full((params.total(nbytes),), params.canary, dtype=torch.uint8, device=device)
    return raw, params.front(nbytes)


def place(
    raw: torch.Tensor,
    front: int,
    dtype: torch.dtype,
    size: Sequence[int],
    stride: Sequence[int],
    offset: int = 0,
) -> torch.Tensor:
    """A (size, stride) tensor of ``dtype`` on raw's storage at ``front`` bytes + ``offset`` elements.

    Built with ``set_`` so the tensor is not a view (``_base is None``), like a fresh allocation.
    """
    out = torch.empty((0,), dtype=dtype, device=raw.device)
    out.set_(raw.untyped_storage(), front // itemsize(dtype) + offset, tuple(size), tuple(stride))
    return out


def guarded_empty(
    size: Sequence[int],
    stride: Sequence[int] | None,
    dtype: torch.dtype,
    device: torch.device | str,
    params: GuardParams,
) -> torch.Tensor:
    """An uninitialised (size, stride) tensor between two canary bands."""
    stride = contiguous_strides(size) if stride is None else tuple(stride)
    nbytes = storage_span(size, stride) * itemsize(dtype)
    raw, front = guarded_storage(nbytes, device, params)
    return place(raw, front, dtype, size, stride)


def fill_sentinel(t: torch.Tensor, params: GuardParams) -> None:
    """Pour the job's sentinel into every element (floats: a NaN with a random payload)."""
    name = dtype_name(t.dtype)
    value = params.sentinels.get(name)
    if value is None or t.numel() == 0:
        return
    if name in _FLOAT_BITS:
        t.view(_INT_VIEW[_FLOAT_BITS[name]]).fill_(value)
    elif name == "bool":
        t.view(torch.uint8).fill_(value)
    else:
        t.fill_(value)


def sentinel_mask(t: torch.Tensor, params: GuardParams) -> torch.Tensor | None:
    """Where t still holds the job's sentinel bit pattern (None when the dtype has no sentinel)."""
    name = dtype_name(t.dtype)
    value = params.sentinels.get(name)
    if value is None:
        return None
    t = t.detach().to("cpu")
    if name in _FLOAT_BITS:
        return t.contiguous().view(_INT_VIEW[_FLOAT_BITS[name]]) == value
    if name == "bool":
        return t.contiguous().view(torch.uint8) == value
    return t == value


_UNTYPED_STORAGE = torch._C.TensorBase.untyped_storage  # no subclass override, no runtime guard


def raw_bytes(t: torch.Tensor) -> torch.Tensor:
    """The whole storage under t as a flat uint8 tensor (shares memory)."""
    storage = _UNTYPED_STORAGE(t)
    raw = torch.empty(0, dtype=torch.uint8, device=storage.device)
    return raw.set_(storage, 0, (storage.nbytes(),), (1,))


@dataclass(frozen=True)
class Allocation:
    """Where a tensor sits in a guarded storage: band sizes and the data region, in bytes."""

    front: int
    data: int
    back: int


def allocation_of(t: torch.Tensor, params: GuardParams) -> Allocation | None:
    """The guarded allocation whose layout produces t's storage size, or None when there is none.

    Band sizes grow with the data size, so the total is strictly increasing in it: bisect.
    """
    total = t.untyped_storage().nbytes()
    lo, hi = 0, total
    while lo <= hi:
        mid = (lo + hi) // 2
        got = params.total(mid)
        if got == total:
            return Allocation(params.front(mid), mid, params.back(mid))
        if got < total:
            lo = mid + 1
        else:
            hi = mid - 1
    return None


def _all_equal(band: torch.Tensor, value: int) -> bool:
    if band.numel() == 0:
        return True
    lo, hi = torch.aminmax(band)  # far cheaper than materialising band == value
    return int(lo) == value == int(hi)


def bands_intact(t: torch.Tensor, alloc: Allocation, params: GuardParams) -> bool:
    raw = raw_bytes(t).to("cpu")
    head = raw[: alloc.front]
    tail = raw[alloc.front + alloc.data :]
    return _all_equal(head, params.canary) and _all_equal(tail, params.canary)


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN-safe), including shape and dtype."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    ab = a.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
    bb = b.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
    return bool(torch.equal(ab, bb))


def nbytes(t: torch.Tensor) -> int:
    return math.prod(t.shape) * t.element_size()
