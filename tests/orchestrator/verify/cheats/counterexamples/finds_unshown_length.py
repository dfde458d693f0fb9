"""An honest red-team generator: lengths the task never showed, inside its domain (one outside first)."""

import random


def generate(domain: dict, seed: int) -> list[dict]:
    rng = random.Random(seed)
    _lo, hi = (int(v) for v in domain["dims"]["n"].strip("[]").split(", "))
    return [
        {"case": {"n": hi + 1}, "dtype": "float32"},  # outside: refused with the validator's reason
        {"case": {"n": 1000}, "dtype": "float32"},  # a shown length: the capped kernel is right on it
        {"case": {"n": rng.randrange(100, 900) | 1}, "dtype": "float32", "special": ["zeros"]},
    ]
