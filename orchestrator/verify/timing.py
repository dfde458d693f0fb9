"""Device timing (device pools only; the CPU interpreter's timings mean nothing).

Modelled on ``triton.testing.do_bench``: estimate one call, warm up for ``warmup_ms``, then repeat for
``rep_ms``, flushing the cache with a 256 MiB write before each measured call. Each measurement ends
with a device-wide synchronize before the end event, so work hidden on side streams is still counted.
The logic (rep planning, statistics, speedup flagging) is pure and tested on the CPU with a fake clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

if TYPE_CHECKING:  # the child runs bench() and must not import the parent's result models
    from orchestrator.verify.models import TimingStats

SUSPICIOUS_SPEEDUP = 10.0


@dataclass(frozen=True)
class BenchConfig:
    warmup_ms: float = 25.0
    rep_ms: float = 100.0
    flush_bytes: int = 256 << 20
    estimate_runs: int = 5
    min_reps: int = 10
    max_reps: int = 10_000


class DeviceClock(Protocol):
    def flush(self) -> None: ...

    def time_call(self, fn: Callable[[], Any]) -> float:
        """Milliseconds one call of fn takes on the device."""
        ...


def plan_reps(estimate_ms: float, config: BenchConfig) -> tuple[int, int]:
    """(warm-up calls, measured calls) for a call that takes about estimate_ms."""
    per_call = max(estimate_ms, 1e-6)
    n_warmup = min(config.max_reps, max(1, math.ceil(config.warmup_ms / per_call)))
    n_rep = min(config.max_reps, max(config.min_reps, math.ceil(config.rep_ms / per_call)))
    return n_warmup, n_rep


def bench(fn: Callable[[], Any], clock: DeviceClock, config: BenchConfig = BenchConfig()) -> list[float]:
    """Per-call times in ms, each measured after a cache flush."""
    estimates = []
    for _ in range(config.estimate_runs):
        clock.flush()
        estimates.append(clock.time_call(fn))
    n_warmup, n_rep = plan_reps(sorted(estimates)[len(estimates) // 2], config)
    for _ in range(n_warmup):
        fn()
    samples = []
    for _ in range(n_rep):
        clock.flush()
        samples.append(clock.time_call(fn))
    return samples


def quantile(samples: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default method)."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(samples: Sequence[float]) -> TimingStats:
    from orchestrator.verify.models import TimingStats

    return TimingStats(
        median_ms=quantile(samples, 0.5),
        p20_ms=quantile(samples, 0.2),
        p80_ms=quantile(samples, 0.8),
        mean_ms=sum(samples) / len(samples),
        min_ms=min(samples),
        n=len(samples),
    )


def speedup(
    candidate: TimingStats, baseline: TimingStats, threshold: float = SUSPICIOUS_SPEEDUP
) -> tuple[float, bool]:
    """(baseline / candidate median, whether it is suspicious enough for human review)."""
    ratio = baseline.median_ms / max(candidate.median_ms, 1e-9)
    return ratio, ratio > threshold


class TorchDeviceClock:
    """Event-based clock for a torch device module (cuda, npu, ...)."""

    def __init__(self, device: torch.device | str, flush_bytes: int) -> None:
        self.device = torch.device(device)
        self.module = torch.get_device_module(self.device.type)
        self.cache = torch.empty(flush_bytes // 4, dtype=torch.int32, device=self.device)

    def flush(self) -> None:
        self.cache.zero_()

    def time_call(self, fn: Callable[[], Any]) -> float:
        start = self.module.Event(enable_timing=True)
        end = self.module.Event(enable_timing=True)
        start.record()
        fn()
        self.module.synchronize()  # side streams included
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))
