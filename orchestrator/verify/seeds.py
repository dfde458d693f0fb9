"""Trial seeds: a fresh base from the OS for every job, recorded in the result, reproducible on demand.

A task says how many seeds (``SEED_COUNT``), never which: with fixed seeds a candidate can memorise
the answers. ``derive_seeds(base, n)`` expands one recorded base into n seeds; ``--seed-base`` or
``--seeds`` on the CLI replays them. Each trial's refill (the same buffers, new values) uses a seed
derived from the trial's own seed, so it is reproduced by the same record.
"""

from __future__ import annotations

import hashlib
import secrets

SEED_MAX = (1 << 63) - 1  # torch.Generator.manual_seed takes up to 2**64 - 1; keep it a signed int64


def draw_seed_base() -> int:
    return secrets.randbits(62)


def _derive(*parts: object) -> int:
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") & SEED_MAX


def derive_seeds(base: int, count: int) -> list[int]:
    return [_derive("trial", base, i) for i in range(count)]


def refill_seed(seed: int) -> int:
    return _derive("refill", seed)


def parse_seeds(text: str) -> list[int]:
    """``"1,2,3"`` -> [1, 2, 3]; ValueError with a one-line reason otherwise."""
    items = [part.strip() for part in text.split(",") if part.strip()]
    if not items:
        raise ValueError("--seeds needs a comma-separated list of integers")
    seeds: list[int] = []
    for item in items:
        try:
            value = int(item, 0)
        except ValueError:
            raise ValueError(f"--seeds: {item!r} is not an integer") from None
        if not 0 <= value <= SEED_MAX:
            raise ValueError(f"--seeds: {value} is outside 0..{SEED_MAX}")
        seeds.append(value)
    if len(set(seeds)) != len(seeds):
        raise ValueError("--seeds lists a seed twice")
    return seeds
