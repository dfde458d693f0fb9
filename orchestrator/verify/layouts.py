"""Input layouts a task may declare (``INPUT_LAYOUTS``), built exactly as real callers pass them.

Every variant keeps the tensor's logical shape; only its memory layout changes. Storage the view
does not cover (row padding, a leading offset, the gaps of a strided view) is filled with NaN (floats)
or the type's extreme value (integers), so a kernel that ignores strides reads garbage and fails. The
harness hands the result to the candidate as is: never copied into a dense buffer.

- ``dense``: contiguous, offset 0;
- ``offset``: a contiguous view that starts some elements into its storage;
- ``padded``: rows padded (row pitch > row length), e.g. a ``[:, :n]`` slice of a wider buffer;
- ``transposed``: the last two dimensions swapped in memory (``w.t()``, column-major activations);
- ``strided``: every other element of the last dimension (``x[..., ::2]``);
- ``broadcast``: the first dimension expanded from its first slice (stride 0, like ``bias.expand``);
  this one changes the values (every slice equals the first), and the reference sees the same tensor.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import torch

LAYOUTS = ("dense", "offset", "padded", "transposed", "strided", "broadcast")
MIN_NDIM = {"padded": 2, "transposed": 2, "strided": 1, "broadcast": 1, "offset": 0, "dense": 0}


class LayoutError(ValueError):
    """A declared layout does not apply to the input it was declared for."""


def _garbage(dtype: torch.dtype) -> float | int | bool:
    if dtype.is_floating_point:
        return float("nan")
    if dtype == torch.bool:
        return True
    return torch.iinfo(dtype).max


def _storage(numel: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.full((numel,), _garbage(dtype), dtype=dtype)


def _contiguous_strides(size: Sequence[int]) -> list[int]:
    strides, acc = [], 1
    for s in reversed(size):
        strides.append(acc)
        acc *= max(s, 1)
    return list(reversed(strides))


def relayout(t: torch.Tensor, layout: str, rng: random.Random) -> torch.Tensor:
    """t's values (``broadcast``: its first slice) in the given memory layout, on the CPU."""
    if layout not in LAYOUTS:
        raise LayoutError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")
    if t.dim() < MIN_NDIM[layout]:
        raise LayoutError(f"layout {layout!r} needs a tensor of at least {MIN_NDIM[layout]} dimensions")
    t = t.detach().to("cpu")
    size = list(t.shape)
    if layout == "dense" or t.numel() == 0:
        return t.contiguous().clone()
    if layout == "offset":
        lead = rng.randrange(1, 65)
        store = _storage(lead + t.numel(), t.dtype)
        out = store.as_strided(size, _contiguous_strides(size), lead)
    elif layout == "padded":
        pitch = size[-1] + rng.randrange(1, 17)
        outer = size[:-1]
        strides = [s * pitch for s in _contiguous_strides(outer)] + [1]
        store = _storage(max(1, t.numel() // max(size[-1], 1)) * pitch, t.dtype)
        out = store.as_strided(size, strides, 0)
    elif layout == "transposed":
        swapped = [*size[:-2], size[-1], size[-2]]
        store = _storage(t.numel(), t.dtype)
        out = store.as_strided(swapped, _contiguous_strides(swapped), 0).transpose(-1, -2)
    elif layout == "strided":
        wide = [*size[:-1], 2 * size[-1]]
        store = _storage(2 * t.numel(), t.dtype)
        out = store.as_strided(wide, _contiguous_strides(wide), 0)[..., ::2]
    else:  # broadcast
        first = t[:1]
        store = _storage(first.numel(), t.dtype)
        base = store.as_strided(list(first.shape), _contiguous_strides(first.shape), 0)
        base.copy_(first)
        return base.expand(size)
    out.copy_(t)
    return out


def apply_layouts(inputs: Sequence[object], layouts: Mapping[int, str], rng: random.Random) -> list[object]:
    out = list(inputs)
    for index, layout in layouts.items():
        value = out[index]
        if not isinstance(value, torch.Tensor):
            raise LayoutError(f"input {index} is not a tensor, it cannot have layout {layout!r}")
        out[index] = relayout(value, layout, rng)
    return out
