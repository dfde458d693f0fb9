"""Driving a whole ``kswarm up -f`` as a user does, and checking by pid what it leaves behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.client.jobs.pools import CATALOGUE_TASKS
from kstest.cli import Up, kswarm
from kstest.jobkit import STANDIN, push_kernels
from kstest.orchestrator import REPO
from kstest.waiting import wait_for

STANDIN_YAML = json.dumps(STANDIN)  # a YAML flow list: the pool's harness_command


def spec_text(swarm: str, agents: int, workers: int, *, heartbeat_s: float = 1, extra: str = "") -> str:
    """A swarm of ``agents`` scripted agents and a cpu pool with ``workers`` workers that run the
    stand-in harness on the catalogue's tasks."""
    return (
        f"swarm: {swarm}\n"
        f"defaults: {{runtime: {{heartbeat_s: {heartbeat_s}}}}}\n"
        f"agents:\n  - pattern: a-{{i}}\n    count: {agents}\n"
        "repos:\n  - name: kernels\n"
        "pools:\n"
        f"  - name: cpu\n    workers: {workers}\n    timeout_s: 60\n"
        f"    harness_command: {STANDIN_YAML}\n    tasks_dir: {CATALOGUE_TASKS}\n"
        "lifecycle: {reconcile_s: 0.3, backoff_base_s: 0.3, backoff_max_s: 2, stall_after_s: 600}\n"
        f"{extra}"
    )


def workers_json(home: Path) -> dict[str, Any]:
    done = kswarm(home, "workers", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def pids_of_swarm(home: Path) -> dict[str, int]:
    """Every process the swarm of ``home`` consists of, by role: agents, workers, orchestrator, Redis."""
    pids: dict[str, int] = {}
    for record in (home / "swarm" / "agents").glob("*.proc.json"):
        pids[f"agent {record.name.removesuffix('.proc.json')}"] = json.loads(record.read_text())["pid"]
    for record in (home / "swarm" / "workers").glob("*.json"):
        pid = json.loads(record.read_text()).get("pid")
        if pid:
            pids[f"worker {record.stem}"] = pid
    info = home / "swarm" / "swarm.json"
    if info.exists():
        pids["orchestrator"] = json.loads(info.read_text())["supervisor_pid"]
    redis_pid = home / "redis" / "redis.pid"
    if redis_pid.exists():
        pids["redis"] = int(redis_pid.read_text())
    return pids


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def processes_with(marker: str) -> list[int]:
    """Pids whose environment or command line mention ``marker`` (the swarm's home): nothing of the
    swarm may hide from the records."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            blob = (entry / "environ").read_bytes() + (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in blob and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


@dataclass
class Pusher:
    """What ``kstest.jobkit.push_kernels`` needs of a gateway: its URL, swarm and an agent's token."""

    url: str
    swarm: str
    tokens: dict[str, str]


def push_kernel(up: Up, home: Path, swarm: str, tmp: Path, files: dict[str, str]) -> tuple[str, str]:
    """As a fresh agent ``pusher``: push ``files`` to ``<swarm>/kernels``; returns (token, branch)."""
    added = kswarm(home, "agent", "add", "pusher", "--json")
    assert added.returncode == 0, added.stderr
    token = json.loads(added.stdout)["token"]
    branch = f"pusher/k-{time.monotonic_ns()}"
    push_kernels(Pusher(up.url, swarm, {"pusher": token}), tmp, f"{swarm}/kernels", "pusher", branch, files)  # type: ignore[arg-type]
    return token, branch


def interrupt(up: Up, timeout: float = 120) -> tuple[int, float]:
    """Ctrl-C on ``kswarm up``: its exit status and how long it took."""
    began = time.monotonic()
    os.kill(up.proc.pid, signal.SIGINT)
    try:
        code = up.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        up.proc.kill()
        raise AssertionError(f"kswarm up did not stop within {timeout}s:\n{up.output()[-3000:]}") from None
    return code, time.monotonic() - began


def wait_workers_running(home: Path, n: int, timeout: float = 60) -> list[dict[str, Any]]:
    def ok() -> list[dict[str, Any]] | None:
        view = workers_json(home)
        rows = view["workers"]
        live = sum(len(p["workers"] or []) for p in view["pools"])
        running = [r for r in rows if r["state"] in ("running", "idle")]  # idle: serving, no job
        return rows if len(running) == n and live == n else None

    return wait_for(ok, timeout, f"{n} workers running and serving")


__all__ = ["REPO", "Up", "kswarm", "wait_for"]
