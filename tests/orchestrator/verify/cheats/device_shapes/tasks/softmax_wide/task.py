"""The catalogue's softmax with device shapes whose rows are all wider than any CPU shape's (1000):
a kernel whose block only covers the CPU rows is wrong on every one of them (deterministic test)."""

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
NAME = "softmax_wide"
SHAPES = [{"rows": 123, "cols": 8191}, {"rows": 33, "cols": 2049}, {"rows": 7, "cols": 4099}]
