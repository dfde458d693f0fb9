"""Log every Python process's GC pauses (a diagnostic for the benchmarks' tails, not a benchmark).

    GC_PAUSES_DIR=/tmp/gc PYTHONPATH=$PWD/bench/gc_pauses .venv/bin/python bench/scale.py --agents 256

Each Python process started with this on its path (the bench, the gateway, the agents' side) appends
``<unix time> <command> gen<N> <ms> collected=<n>`` to ``$GC_PAUSES_DIR/<pid>.log`` for every
collection over 2 ms and every full (generation 2) one. Found this way: a full pass over a gateway's
start-up heap took 70-160 ms, the p99 of post→inbox (docs/performance.md, "Scale").
"""

from __future__ import annotations

import gc
import os
import sys
import time
from pathlib import Path

_where = os.environ.get("GC_PAUSES_DIR")
if _where:
    _log = (Path(_where) / f"{os.getpid()}.log").open("a", buffering=1)
    _started: list[float] = [0.0]

    def _pause(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            _started[0] = time.perf_counter()
            return
        took = (time.perf_counter() - _started[0]) * 1000
        if took > 2 or info["generation"] == 2:
            command = " ".join(sys.argv[:2])[:60] or "?"
            gen, collected = info["generation"], info["collected"]
            _log.write(f"{time.time():.3f} {command} gen{gen} {took:.1f}ms collected={collected}\n")

    gc.callbacks.append(_pause)
