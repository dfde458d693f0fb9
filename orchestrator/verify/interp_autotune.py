"""``@triton.autotune`` on the cpu pool: every config runs under the interpreter, the kept one is drawn.

On a device, Triton's autotuner benchmarks each (pruned) config once per key through the driver's
benchmarker and keeps the fastest. The interpreter has no driver, so an autotuned kernel could not
run on the cpu pool at all (it was answered "unverifiable"). Here the benchmarker executes each
config's launch once -- with its pre/post hooks, ``reset_to_zero`` and ``restore_value``, exactly
what a device's benchmark runs do to the arguments -- under the same instruments as every launch,
and answers a random time, so the config kept is drawn at random among the pruned ones. Which
config is fastest differs from device to device; a kernel must be right with every one of them, and
every one of them runs. The autotuners' choices are forgotten before every call (``forget``), so each
call of a job draws again: a config that is wrong only in its values is kept, and judged, in some of
them.

A candidate's own ``do_bench=`` stays its own (the monitor checks that it is the candidate's code).
"""

from __future__ import annotations

import random
import secrets
import weakref
from collections.abc import Callable
from typing import Any


class InterpreterBench:
    """A benchmarker for Triton's autotuner that runs the call once and draws its "time"."""

    def __init__(self) -> None:
        self.rng = random.Random(secrets.randbits(64))
        self.runs = 0
        self.tuners: weakref.WeakSet[Any] = weakref.WeakSet()  # every autotuner that asked for it

    def forget(self) -> None:
        """Drop every autotuner's kept configs: the next launch of each key benchmarks and draws anew."""
        for tuner in list(self.tuners):
            cache = tuner.__dict__.get("cache")
            if isinstance(cache, dict):
                cache.clear()

    def __call__(self, fn: Callable[[], Any], *args: Any, quantiles: Any = None, **kwargs: Any) -> Any:
        fn()
        self.runs += 1
        t = self.rng.random()
        return [t, t, t] if quantiles is not None else t


def install_autotune_bench(bench: InterpreterBench) -> None:
    """Make every Autotuner without its own ``do_bench`` use ``bench`` (once per child, before the
    integrity baseline is taken: it is the same in every call, watched or not)."""
    from triton.runtime.autotuner import Autotuner

    def do_bench(self: Any) -> Any:
        own = self.__dict__.get("_do_bench")
        if own is not None:
            return own
        bench.tuners.add(self)
        return bench

    Autotuner.do_bench = property(do_bench)
