"""Shared helpers for the benchmarks: percentiles, the test-support import path, gateway metrics."""

from __future__ import annotations

import io
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tree itself first: tests/ mirrors its folders (tests/orchestrator, ...)
sys.path.append(str(ROOT / "tests"))  # kstest: the same real gateway/Redis helpers the tests use


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation."""
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[min(98, max(0, int(q) - 1))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def gateway_metric(url: str, operator_token: str, name: str) -> float:
    """One unlabelled value from the gateway's /metrics (nan: not there, or the gateway too busy)."""
    from gateway.client.target import auth_headers

    try:
        text = httpx.get(f"{url}/metrics", headers=auth_headers(operator_token), timeout=30).text
    except httpx.TimeoutException:
        return float("nan")
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")]
    return values[0] if values else float("nan")


def wait_for_waiters(url: str, operator_token: str, n: int, bound: float = 180.0) -> None:
    """Until ``n`` inbox waits are blocked in the gateway (a fixed sleep is too short under load)."""
    deadline = time.monotonic() + bound
    while not gateway_metric(url, operator_token, "kswarm_waiters") >= n:  # nan: not known yet
        if time.monotonic() > deadline:
            waiting = gateway_metric(url, operator_token, "kswarm_waiters")
            raise SystemExit(f"only {waiting:.0f} of {n} agents ever waited")
        time.sleep(0.2)


def baseline_tree(commit: str, into: Path) -> Path:
    """The gateway package of ``commit``, unpacked on its own (read-only use of the repository)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit, "gateway"],
        check=True,
        capture_output=True,
    ).stdout
    into.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into
