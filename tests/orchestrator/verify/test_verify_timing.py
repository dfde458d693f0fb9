"""Timing logic (device pools only), tested with a fake clock: no GPU here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from orchestrator.verify.timing import BenchConfig, bench, plan_reps, quantile, speedup, summarize


class FakeClock:
    def __init__(self, times: list[float]) -> None:
        self.times = times
        self.calls = 0
        self.flushes = 0

    def flush(self) -> None:
        self.flushes += 1

    def time_call(self, fn: Callable[[], Any]) -> float:
        fn()
        value = self.times[self.calls % len(self.times)]
        self.calls += 1
        return value


def test_plan_reps() -> None:
    config = BenchConfig(warmup_ms=25, rep_ms=100, min_reps=10, max_reps=1000)
    assert plan_reps(1.0, config) == (25, 100)
    assert plan_reps(50.0, config) == (1, 10)  # slow call: at least min_reps
    assert plan_reps(1e-9, config) == (1000, 1000)  # a near-free call: both counts capped


def test_bench_flushes_before_every_measured_call() -> None:
    clock = FakeClock([2.0])
    calls: list[int] = []
    samples = bench(lambda: calls.append(1), clock, BenchConfig(warmup_ms=10, rep_ms=20, min_reps=3))
    assert samples == [2.0] * 10  # rep_ms / estimate
    assert clock.flushes == 5 + 10  # estimate runs + measured runs
    assert len(calls) == 5 + 5 + 10  # estimate + warm-up (10 ms / 2 ms) + measured


def test_quantiles_and_summary() -> None:
    samples = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert quantile(samples, 0.5) == 3.0
    assert quantile(samples, 0.2) == pytest.approx(1.8)
    assert quantile(samples, 0.8) == pytest.approx(4.2)
    stats = summarize(samples)
    assert (stats.median_ms, stats.min_ms, stats.mean_ms, stats.n) == (3.0, 1.0, 3.0, 5)
    with pytest.raises(ValueError):
        quantile([], 0.5)


def test_speedup_above_ten_is_suspicious() -> None:
    base = summarize([10.0])
    assert speedup(summarize([2.0]), base) == (5.0, False)
    ratio, suspicious = speedup(summarize([0.5]), base)
    assert ratio == 20.0 and suspicious
    assert speedup(summarize([1.0]), base) == (10.0, False)  # exactly 10x is not flagged
