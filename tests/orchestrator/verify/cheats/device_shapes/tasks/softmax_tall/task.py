"""The catalogue's softmax with device shapes of more than 4096 rows (the CPU shapes have at most 24):
a kernel whose grid only covers 4096 rows is wrong on every one of them (deterministic test)."""

import runpy
from pathlib import Path

_CATALOGUE = Path(__file__).resolve().parents[7] / "gateway" / "tasks" / "catalogue" / "tasks"
globals().update(
    {
        k: v
        for k, v in runpy.run_path(str(_CATALOGUE / "softmax" / "task.py")).items()
        if not k.startswith("__")
    }
)
NAME = "softmax_tall"
SHAPES = [{"rows": 4097, "cols": 513}, {"rows": 5000, "cols": 100}, {"rows": 8193, "cols": 33}]
