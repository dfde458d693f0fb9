"""Special values planted into a trial's inputs (a task's ``DOMAIN["special_values"]``, issue 27).

After ``make_inputs`` and before the layouts are applied, every floating-point tensor input gets the
requested values planted deterministically (the trial's seed decides where), one function per value:

- ``zeros``: whole slices along the first dimension set to zero (a 1-D input: a run of elements);
- ``nan``: a few positions set to NaN;
- ``inf``: a few positions set to +Inf and a few to -Inf;
- ``denormals``: a share of positions set to subnormal numbers of the dtype (both signs);
- ``ties``: in every row (last dimension) the maximum repeated at another position;
- ``large``: a few positions set to magnitudes near the dtype's range, with headroom (a sixteenth
  of its largest finite value) so that a sum or difference of two of them does not overflow.

Integer and bool inputs are left as they are. The same function builds the inputs of fixed trials,
counterexamples and regression cases (planning.py), so a counterexample reproduces exactly.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence

import torch

from orchestrator.verify.domain import SPECIAL_VALUES

# At most this many positions get a NaN, an Inf or a large value (and at least one).
FEW = 8


def _positions(t: torch.Tensor, rng: random.Random, share: float = 1 / 64) -> list[int]:
    count = min(FEW, max(1, math.ceil(t.numel() * share)))
    return sorted(rng.sample(range(t.numel()), k=min(count, t.numel())))


def _set(t: torch.Tensor, positions: Sequence[int], values: Sequence[float]) -> None:
    flat = t.view(-1)
    for position, value in zip(positions, values, strict=True):
        flat[position] = value


def zeros(t: torch.Tensor, rng: random.Random) -> None:
    if t.dim() >= 2 and t.shape[0] > 0:
        rows = {0, rng.randrange(t.shape[0])}
        for row in rows:
            t[row] = 0
        return
    n = t.numel()
    start = rng.randrange(n)
    t.view(-1)[start : start + max(1, n // 8)] = 0


def nan(t: torch.Tensor, rng: random.Random) -> None:
    positions = _positions(t, rng)
    _set(t, positions, [float("nan")] * len(positions))


def inf(t: torch.Tensor, rng: random.Random) -> None:
    positions = _positions(t, rng)
    _set(t, positions, [float("inf") if i % 2 == 0 else float("-inf") for i in range(len(positions))])


def denormals(t: torch.Tensor, rng: random.Random) -> None:
    tiny = torch.finfo(t.dtype).tiny  # the smallest normal number: halved, it is subnormal
    positions = _positions(t, rng, share=1 / 8)
    values = [rng.choice((-1.0, 1.0)) * tiny * 0.5 ** rng.randint(1, 6) for _ in positions]
    _set(t, positions, values)


def ties(t: torch.Tensor, rng: random.Random) -> None:
    if t.dim() == 0 or t.shape[-1] < 2:
        return
    rows = t.view(-1, t.shape[-1])  # t is contiguous (plant's copy): a view
    top = torch.argmax(torch.nan_to_num(rows.float(), nan=-math.inf), dim=1)
    g = torch.Generator().manual_seed(rng.getrandbits(63))
    other = torch.randint(0, rows.shape[1] - 1, (rows.shape[0],), generator=g)
    other = torch.where(other >= top, other + 1, other)  # any position but the maximum's
    every = torch.arange(rows.shape[0])
    rows[every, other] = rows[every, top]


def large(t: torch.Tensor, rng: random.Random) -> None:
    biggest = torch.finfo(t.dtype).max / 16
    positions = _positions(t, rng)
    _set(t, positions, [rng.choice((-1.0, 1.0)) * biggest * rng.uniform(0.5, 1.0) for _ in positions])


PLANTERS: Mapping[str, Callable[[torch.Tensor, random.Random], None]] = {
    "zeros": zeros,
    "nan": nan,
    "inf": inf,
    "denormals": denormals,
    "ties": ties,
    "large": large,
}
assert tuple(PLANTERS) == SPECIAL_VALUES, "one planter per special value the domain knows"


def plant(inputs: Sequence[object], special: Sequence[str], seed: int) -> list[object]:
    """``inputs`` with ``special`` planted into each floating-point tensor (in place of a copy)."""
    out = list(inputs)
    if not special:
        return out
    for index, value in enumerate(out):
        if not isinstance(value, torch.Tensor) or not value.dtype.is_floating_point or value.numel() == 0:
            continue
        planted = value.detach().clone().contiguous()
        for name in special:
            PLANTERS[name](planted, random.Random(f"special:{name}:{seed}:{index}"))
        out[index] = planted
    return out
