"""What acts on a swarm from outside its reconcile loop: which swarm runs in a home (``SwarmInfo``), the
one-supervisor lock, the backends, and the operator actions that ``kswarm down``, ``agent restart``,
``agent quarantine``, ``agent release`` and ``ps`` perform on a machine that shares the home."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from gateway.client.http import GatewayClient
from orchestrator.runtime.base import AgentRuntime
from orchestrator.spec import SwarmSpec
from orchestrator.supervisor.reconcile import control_dir, hold, load_record, mark_restart, unhold
from orchestrator.swarm_dir.provision import SwarmLayout
from orchestrator.swarm_dir.uid_ranges import uid_base_for


class SupervisorError(RuntimeError):
    """The swarm cannot be supervised (already supervised, unknown backend, ...)."""


def make_runtime(backend: str, layout: SwarmLayout, spec: SwarmSpec) -> AgentRuntime:
    if backend == "process":
        from orchestrator.runtime.process import ProcessRuntime

        return ProcessRuntime(layout, spec.swarm, spec.process.isolation)
    if backend == "docker":
        from orchestrator.runtime.docker import DockerRuntime

        return DockerRuntime(layout, spec.swarm, spec.docker)
    raise SupervisorError(f"unknown backend {backend!r}: use process or docker")


def uses_uids(backend: str, runtime: AgentRuntime) -> bool:
    if backend == "docker":
        return True  # containers always get a non-root uid of their own
    return bool(getattr(runtime, "own_uids", False))


def agent_uid_base(spec: SwarmSpec, backend: str, layout: SwarmLayout) -> int:
    """The spec's pinned ``uid_base``, else this home's block from the machine-wide registry."""
    pinned = spec.docker.uid_base if backend == "docker" else spec.process.uid_base
    return pinned if pinned is not None else uid_base_for(layout.root)


@dataclass(frozen=True)
class SwarmInfo:
    """``swarm/swarm.json``: which swarm runs here, and how to reach its pieces from another terminal."""

    swarm: str
    backend: str
    spec_path: str | None
    supervisor_pid: int
    started_at: float
    gateway_url: str | None
    gateway_socket: str | None
    agents: list[str]
    spec: dict[str, Any] | None = None  # the spec as it was started: the CLI needs no file

    @classmethod
    def load(cls, layout: SwarmLayout) -> SwarmInfo | None:
        try:
            return cls(**json.loads(layout.swarm_file.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def save(self, layout: SwarmLayout) -> None:
        layout.root.mkdir(parents=True, exist_ok=True)
        tmp = layout.swarm_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.__dict__, indent=1))
        tmp.replace(layout.swarm_file)


class SupervisorLock:
    """Held for a supervisor's lifetime; ``held_elsewhere`` tells whether one runs."""

    def __init__(self, layout: SwarmLayout) -> None:
        self.path = layout.root / ".supervisor.lock"
        self.fh: Any = None

    def acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = open(self.path, "a+")
        try:
            fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.fh.close()
            self.fh = None
            return False
        return True

    def release(self) -> None:
        if self.fh is not None:
            fcntl.flock(self.fh, fcntl.LOCK_UN)
            self.fh.close()
            self.fh = None

    def held_elsewhere(self) -> bool:
        if self.acquire():
            self.release()
            return False
        return True


# -- operator actions (another terminal; no supervisor object needed) ---------------------------


def request_restart(layout: SwarmLayout, name: str) -> None:
    mark_restart(layout, name)


def quarantine(layout: SwarmLayout, runtime: AgentRuntime, client: GatewayClient | None, name: str) -> int:
    """Stop the agent, revoke its tokens, keep its files; returns how many tokens were revoked."""
    hold(layout, name)  # first: the supervisor must not restart it meanwhile
    runtime.stop(name)
    revoked = 0
    if client is not None:
        revoked = client.revoke_tokens(name)
        client.set_disabled(name, True)
    return revoked


def release(layout: SwarmLayout, client: GatewayClient | None, name: str) -> None:
    """Undo quarantine: the supervisor issues a fresh token and starts the agent on its next pass."""
    if client is not None:
        client.set_disabled(name, False)
    unhold(layout, name)


def stop_supervisor(layout: SwarmLayout, pid: int | None, timeout: float = 30.0) -> bool:
    """SIGTERM the process that supervises this home (``kswarm up``) and wait until its lock is free."""
    lock = SupervisorLock(layout)
    if not lock.held_elsewhere():
        return True
    if pid and pid != os.getpid():
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not lock.held_elsewhere():
            return True
        time.sleep(0.1)
    return False


def say(line: str) -> None:
    """One line for the operator's terminal (``kswarm up``'s), whatever the logging set-up."""
    print(f"kswarm: {line}", file=sys.stderr, flush=True)


def stop_swarm(layout: SwarmLayout, runtime: AgentRuntime, purge: bool) -> list[str]:
    """Stop every agent the backend knows of (and the recorded ones), side by side, and any job worker
    an orchestrator left running; purge deletes their files too."""
    from orchestrator.supervisor.pool_workers import kill_orphans, purge_workers

    info = SwarmInfo.load(layout)
    names = set(runtime.list()) | set(info.agents if info else [])
    names |= {
        p.name.removesuffix(".json")
        for p in (layout.root / "agents").glob("*.json")
        if not p.name.endswith(".proc.json")
    }
    if names:
        with ThreadPoolExecutor(max_workers=min(16, len(names)), thread_name_prefix="kswarm-down") as pool:
            list(pool.map(lambda name: runtime.remove(name, purge=purge), sorted(names)))
    kill_orphans(layout)
    if purge:
        for name in names:
            layout.state_file(name).unlink(missing_ok=True)
        purge_workers(layout)
    if purge:
        for kind in ("requests", "quarantine"):
            for p in control_dir(layout, kind).glob("*"):
                p.unlink()
        layout.swarm_file.unlink(missing_ok=True)
    return sorted(names)


def agent_rows(layout: SwarmLayout, runtime: AgentRuntime) -> list[dict[str, Any]]:
    """What ``kswarm ps`` shows when no gateway answers: the orchestrator's own records. The state is
    ``unknown`` (liveness is the gateway's computation: gateway/swarm/liveness.py); the record's own
    lifecycle state is in ``supervisor_state`` and the reason."""
    info = SwarmInfo.load(layout)
    actual = runtime.list()
    names = sorted(set(info.agents if info else []) | set(actual))
    now = time.time()
    rows = []
    for name in names:
        rec = load_record(layout, name, runtime.backend)
        status = actual.get(name) or runtime.status(name)
        started = status.started_at or rec.started_at
        said = rec.last_error or rec.last_output
        rows.append(
            {
                "agent": name,
                "state": "unknown",
                "supervisor_state": rec.state,
                "reason": f"no gateway; the orchestrator's record says {rec.state}"
                + (f": {said}" if said else ""),
                "backend": runtime.backend,
                "uptime_s": round(now - started, 1) if status.running and started else None,
                "restarts": rec.restarts,
                "last_heartbeat_s": round(now - rec.last_heartbeat, 1) if rec.last_heartbeat else None,
                "last_error": said,
                "doing": "",
                "email": "",
                "tokens": 0,
                "cost_usd": 0.0,
            }
        )
    return rows
