"""The orchestrator's entry points: ``Supervisor`` (runs the reconcile loop) and the operator actions
that ``kswarm down``, ``agent restart``, ``agent quarantine`` and ``agent release`` perform on a
machine that shares the home.

At most one supervisor runs per ``$KSWARM_HOME``: it holds an ``flock`` on ``swarm/.supervisor.lock``
for its whole life, and a second one fails fast instead of duplicating agents. With the gateway's
Redis it also holds the swarm seam (orchestrator/control.py): a heartbeat, the published view and the
control stream through which the UI and ``/api/swarm`` reach it.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.client.http import GatewayClient, GatewayError, GatewayTarget
from orchestrator.control import ControlHandler, SwarmSeam
from orchestrator.control_link import seam_redis_url
from orchestrator.provision import SwarmLayout
from orchestrator.reconcile import (
    AgentRecord,
    Reconciler,
    control_dir,
    hold,
    load_record,
    mark_restart,
    unhold,
)
from orchestrator.runtime.base import AgentRuntime
from orchestrator.spec import SwarmSpec
from orchestrator.uid_ranges import uid_base_for

log = logging.getLogger("kswarm.supervisor")

HEARTBEAT_TTL_S = 15.0
REQUEST_WAIT_S = 0.5  # longest block on the control stream: how soon a stop is noticed


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


class Supervisor:
    """Keeps a swarm's agents running. ``run(stop)`` blocks until ``stop`` is set; agents keep running
    after it returns (the next supervisor adopts them); ``shutdown()`` stops them all."""

    def __init__(
        self,
        spec: SwarmSpec,
        backend: str,
        home: Path,
        gateway_url: str | None,
        operator_token: str,
        socket_path: Path,
        redis_url: str | None = None,
        heartbeat_ttl_s: float = HEARTBEAT_TTL_S,
    ) -> None:
        self.spec = spec
        self.backend = backend
        self.layout = SwarmLayout(home)
        self.socket_path = socket_path
        self.gateway_url = gateway_url
        target = GatewayTarget(
            token=operator_token, url=gateway_url, socket=None if gateway_url else socket_path
        )
        self.client = GatewayClient(target)
        self.runtime = make_runtime(backend, self.layout, spec)
        self.reconciler = Reconciler(
            spec,
            self.runtime,
            self.layout,
            self.client,
            socket_path,
            agent_uid_base(spec, backend, self.layout) if uses_uids(backend, self.runtime) else 0,
            uses_uids(backend, self.runtime),
        )
        self.lock = SupervisorLock(self.layout)
        self.redis_url = seam_redis_url(home, redis_url)
        self.heartbeat_ttl_s = heartbeat_ttl_s
        self.seam: SwarmSeam | None = None

    @property
    def warning(self) -> str | None:
        """A line for ``kswarm up`` to print (e.g. the process backend cannot isolate files here)."""
        return getattr(self.runtime, "warning", None)

    def _setup(self) -> None:
        for channel in self.spec.channels:
            try:
                self.client.create_channel(channel.name, channel.topic)
            except GatewayError as exc:
                log.warning("channel %s: %s", channel.name, exc)
        self._provision_repos()
        SwarmInfo(
            swarm=self.spec.swarm,
            backend=self.backend,
            spec_path=str(self.spec.source) if self.spec.source else None,
            supervisor_pid=os.getpid(),
            started_at=time.time(),
            gateway_url=self.gateway_url,
            gateway_socket=str(self.socket_path),
            agents=[a.name for a in self.spec.expand()],
            spec=self.spec.model_dump(mode="json", exclude={"source"}),
        ).save(self.layout)

    def _provision_repos(self) -> None:
        """The spec's repos in the forge (org = the swarm's name), each protected by the review policy."""
        review = self.spec.review
        for repo in self.spec.repos:
            policy = {
                "required_approvals": review.approvals,
                "required_checks": review.required_checks,
                "protected_branches": repo.protected,
                "dataset": repo.kind == "dataset",
            }
            try:
                self.client.request(
                    "POST", "/api/forge/repos", json={"org": self.spec.swarm, "name": repo.name}
                )
                self.client.request(
                    "PUT", f"/api/forge/repos/{self.spec.swarm}/{repo.name}/policy", json=policy
                )
            except GatewayError as exc:
                log.warning("repo %s/%s: %s", self.spec.swarm, repo.name, exc)

    def run(self, stop: threading.Event) -> None:
        if not self.lock.acquire():
            raise SupervisorError(f"another orchestrator already supervises {self.layout.root}")
        try:
            self._setup()
            if self.redis_url is None:
                log.warning("no Redis of the gateway known: the UI does not see this swarm (redis_url)")
            else:
                handler = ControlHandler(self.spec, self.layout, self.runtime, self.client)
                self.seam = SwarmSeam.open(self.redis_url, handler, self.reconciler, self.heartbeat_ttl_s)
                while self.seam.take(0):  # what was asked while no orchestrator ran comes first
                    pass
            while not stop.is_set():
                try:
                    records = self.reconciler.reconcile_once()
                except Exception:  # one bad pass (Docker hiccup, full disk) must not end supervision
                    log.exception("reconcile pass failed")
                    records = {}
                if self.seam is not None:
                    self.seam.passed(records)
                self._wait(stop)
        finally:
            if self.seam is not None:
                self.seam.stop()
            self.lock.release()
            self.client.close()

    def _wait(self, stop: threading.Event) -> None:
        """Until the next pass; a control request cuts the wait short (its restart happens at once)."""
        deadline = time.monotonic() + self.spec.lifecycle.reconcile_s
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            handled = self.seam.take(min(left, REQUEST_WAIT_S)) if self.seam is not None else None
            if handled:
                return
            if handled is None:
                stop.wait(min(left, REQUEST_WAIT_S))

    def reconcile_once(self) -> dict[str, AgentRecord]:
        """One pass, for callers that drive the loop themselves (tests, ``kswarm up --once``)."""
        return self.reconciler.reconcile_once()

    def shutdown(self, purge: bool = False) -> None:
        """Stop (and with ``purge`` delete) every agent of this swarm."""
        stop_swarm(self.layout, self.runtime, purge)


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


def stop_swarm(layout: SwarmLayout, runtime: AgentRuntime, purge: bool) -> list[str]:
    """Stop every agent the backend knows of (and the recorded ones); purge deletes their files too."""
    info = SwarmInfo.load(layout)
    names = set(runtime.list()) | set(info.agents if info else [])
    names |= {
        p.name.removesuffix(".json")
        for p in (layout.root / "agents").glob("*.json")
        if not p.name.endswith(".proc.json")
    }
    for name in sorted(names):
        runtime.remove(name, purge=purge)
        if purge:
            layout.state_file(name).unlink(missing_ok=True)
    if purge:
        for kind in ("requests", "quarantine"):
            for p in control_dir(layout, kind).glob("*"):
                p.unlink()
        layout.swarm_file.unlink(missing_ok=True)
    return sorted(names)


def agent_rows(
    layout: SwarmLayout, runtime: AgentRuntime, beats: dict[str, float | None]
) -> list[dict[str, Any]]:
    """What ``kswarm ps`` prints: agent, backend, state, uptime, restarts, last heartbeat."""
    info = SwarmInfo.load(layout)
    actual = runtime.list()
    names = sorted(set(info.agents if info else []) | set(actual))
    now = time.time()
    rows = []
    for name in names:
        rec = load_record(layout, name, runtime.backend)
        status = actual.get(name) or runtime.status(name)
        state = (
            rec.state
            if status.running or rec.state in ("backoff", "crash-loop", "quarantined")
            else "stopped"
        )
        started = status.started_at or rec.started_at
        beat = beats.get(name, rec.last_heartbeat)
        rows.append(
            {
                "agent": name,
                "backend": runtime.backend,
                "state": state,
                "uptime_s": round(now - started, 1) if status.running and started else None,
                "restarts": rec.restarts,
                "last_heartbeat_s": round(now - beat, 1) if beat else None,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    """``python -m orchestrator.supervisor -f swarm.yaml``: the orchestrator alone, next to a running
    gateway found through $KSWARM_URL/$KSWARM_TOKEN or $KSWARM_HOME (compose's orchestrator service)."""
    import argparse

    from gateway.client.http import kswarm_home, target_from_env
    from orchestrator.spec import load_spec

    parser = argparse.ArgumentParser(prog="python -m orchestrator.supervisor")
    parser.add_argument("-f", "--file", type=Path, default=Path("swarm.yaml"), help="The swarm spec.")
    parser.add_argument("--backend", choices=["process", "docker"], help="Default: the spec's backend.")
    parser.add_argument(
        "--socket", type=Path, help="Gateway unix socket; default $KSWARM_HOME/run/gateway.sock."
    )
    parser.add_argument(
        "--redis-url",
        help="The gateway's Redis (the swarm seam); default $REDIS_URL, $KSWARM_GATEWAY_REDIS_URL or "
        "the home's embedded Redis.",
    )
    parser.add_argument(
        "--heartbeat-ttl",
        type=float,
        default=HEARTBEAT_TTL_S,
        help="Seconds after its last heartbeat that the UI takes this orchestrator for gone.",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    home = kswarm_home()
    target = target_from_env(home)
    if not target.token:
        raise SystemExit("no operator token: set KSWARM_TOKEN or write $KSWARM_HOME/operator.token")
    spec = load_spec(args.file)
    socket = args.socket or target.socket or home / "run" / "gateway.sock"
    supervisor = Supervisor(
        spec,
        args.backend or spec.backend,
        home,
        target.url,
        target.token,
        socket,
        redis_url=args.redis_url,
        heartbeat_ttl_s=args.heartbeat_ttl,
    )
    if supervisor.warning:
        log.warning("%s", supervisor.warning)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    supervisor.run(stop)


if __name__ == "__main__":
    main()
