"""Guard bands and allocation sentinels, shared by the child (which lays them out) and the parent
(which checks them on the tensors the child saved).

Layout of a guarded tensor: one storage of ``guard | data | guard`` where both guards hold CANARY_BYTE
and the tensor is a view at ``storage_offset == guard``. torch.save keeps whole storages, so the parent
can verify the guards from the saved file alone, without trusting anything the child says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import torch

CANARY_BYTE = 0xA5
MIN_GUARD_ELEMS = 1024
MAX_GUARD_ELEMS = 1 << 22
GUARD_QUANTUM = 256

# Finite, unlikely values written into torch.empty-style allocations, so an output the kernel never
# wrote is recognisable (and never accidentally right, as zeroed fresh pages can be).
_FLOAT_SENTINEL = -31337.0
_INT_SENTINEL: Mapping[torch.dtype, int] = MappingProxyType(
    {
        torch.int8: -91,
        torch.uint8: 0xA5,
        torch.int16: -23131,
        torch.int32: -1515870811,
        torch.int64: -6510615555426900571,
    }
)


def sentinel_value(dtype: torch.dtype) -> float | int | None:
    if dtype.is_floating_point:
        return _FLOAT_SENTINEL
    return _INT_SENTINEL.get(dtype)


def storage_span(size: Sequence[int], stride: Sequence[int]) -> int:
    """Elements a (size, stride) view touches, counted from its first element."""
    if any(s == 0 for s in size):
        return 0
    return 1 + sum((s - 1) * abs(st) for s, st in zip(size, stride, strict=True))


def guard_elems(span: int) -> int:
    # A multiple of 256 elements keeps the data start as aligned as the allocation itself (Triton
    # specialises on 16-byte alignment and tensor descriptors require it).
    elems = min(max(span, MIN_GUARD_ELEMS), MAX_GUARD_ELEMS)
    return -(-elems // GUARD_QUANTUM) * GUARD_QUANTUM


def contiguous_strides(size: Sequence[int]) -> tuple[int, ...]:
    strides: list[int] = []
    acc = 1
    for s in reversed(size):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def guarded_empty(
    size: Sequence[int], stride: Sequence[int] | None, dtype: torch.dtype, device: torch.device | str
) -> torch.Tensor:
    """An uninitialised (size, stride) tensor living between two canary guard bands."""
    stride = contiguous_strides(size) if stride is None else tuple(stride)
    span = storage_span(size, stride)
    guard = guard_elems(span)
    itemsize = torch.empty((), dtype=dtype).element_size()
    raw = torch.full(((2 * guard + span) * itemsize,), CANARY_BYTE, dtype=torch.uint8, device=device)
    return raw.view(dtype).as_strided(tuple(size), stride, guard)


def guarded_copy(src: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """A guarded copy keeping src's strides (tasks may hand out transposed or strided inputs)."""
    overlapping = any(st == 0 and sz > 1 for sz, st in zip(src.shape, src.stride(), strict=True))
    stride = contiguous_strides(src.shape) if overlapping else src.stride()
    out = guarded_empty(src.shape, stride, src.dtype, device)
    out.copy_(src)
    return out


def _raw_bytes(t: torch.Tensor) -> torch.Tensor:
    storage = t.untyped_storage()
    raw = torch.empty(0, dtype=torch.uint8, device=storage.device)
    return raw.set_(storage, 0, (storage.nbytes(),), (1,))


def guard_intact(t: torch.Tensor) -> bool | None:
    """True/False for a guarded tensor's guard bands; None when ``t`` does not have the guarded layout."""
    span = storage_span(t.shape, t.stride())
    guard = guard_elems(span)
    itemsize = t.element_size()
    if t.storage_offset() != guard or t.untyped_storage().nbytes() != (2 * guard + span) * itemsize:
        return None
    raw = _raw_bytes(t)
    head = raw[: guard * itemsize]
    tail = raw[(guard + span) * itemsize :]
    return bool(torch.all(head == CANARY_BYTE)) and bool(torch.all(tail == CANARY_BYTE))


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
