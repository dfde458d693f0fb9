"""A real swarm on a real gateway for the seam's tests: the supervisor (process backend, real agent
processes) in a thread, or as ``python -m orchestrator.supervisor`` to kill it like a crash."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import redis as redis_sync
import yaml

from gateway.swarm import keys
from gateway.swarm.models import ControlRequest, SwarmReport
from kstest.gateway import GatewayThread
from orchestrator.spec import SwarmSpec, parse_spec
from orchestrator.supervisor.main import Supervisor, make_runtime, stop_swarm

REPO = Path(__file__).resolve().parents[3]
AGENTS = "  - pattern: dev-{i}\n    count: 2\n"
LIFECYCLE = {"reconcile_s": 0.2, "backoff_base_s": 0.2, "backoff_max_s": 1.0, "stall_after_s": 60}
T = TypeVar("T")


def swarm_spec(gw: GatewayThread, agents_yaml: str = AGENTS) -> SwarmSpec:
    # A 1 s agent heartbeat also bounds the inbox long-poll the gateway waits for when it stops.
    timing = yaml.safe_dump({"lifecycle": LIFECYCLE})
    defaults = "defaults: {runtime: {heartbeat_s: 1}}\n"
    return parse_spec(f"swarm: {gw.swarm}\n{defaults}agents:\n{agents_yaml}\n{timing}")


def report(gw: GatewayThread) -> SwarmReport:
    with gw.client(gw.operator_token) as op:
        reply = op.get("/api/swarm")
    assert reply.status_code == 200, reply.text
    return SwarmReport.model_validate(reply.json())


def running(gw: GatewayThread, *names: str) -> bool:
    """Whether the published records say every one of ``names`` runs (and a supervisor is alive)."""
    now = report(gw)
    states = {a.name: a for a in now.agents}
    return now.supervising and all(n in states and states[n].running for n in names)


def control_requests(gw: GatewayThread) -> list[tuple[str, ControlRequest]]:
    client = redis_sync.Redis.from_url(gw.redis_url, decode_responses=True)
    try:
        entries = client.xrange(keys.CONTROL)
    finally:
        client.close()
    return [(i, ControlRequest.model_validate_json(f[keys.CONTROL_FIELD])) for i, f in entries]


@contextmanager
def supervised_swarm(gw: GatewayThread, agents_yaml: str = AGENTS, **options: Any) -> Iterator[Supervisor]:
    """The real orchestrator supervising ``agents_yaml`` on ``gw``'s home, publishing to its Redis."""
    spec = swarm_spec(gw, agents_yaml)
    options.setdefault("redis_url", gw.redis_url)
    supervisor = Supervisor(spec, "process", gw.home, gw.url, gw.operator_token, gw.socket_path, **options)
    stop = threading.Event()
    thread = threading.Thread(target=supervisor.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield supervisor
    finally:
        stop.set()
        thread.join(30)
        stop_swarm(supervisor.layout, supervisor.runtime, purge=True)


class SupervisorProcess:
    """``python -m orchestrator.supervisor`` for ``gw``: killed with SIGKILL like a crash, started again."""

    def __init__(self, gw: GatewayThread, spec: SwarmSpec, heartbeat_ttl_s: float) -> None:
        self.gw = gw
        self.spec = spec
        self.ttl = heartbeat_ttl_s
        self.spec_path = gw.home.parent / "swarm.yaml"
        self.spec_path.write_text(yaml.safe_dump(spec.model_dump(mode="json", exclude={"source"})))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KSWARM_") and k != "REDIS_URL"}
        env.update(KSWARM_HOME=str(self.gw.home), KSWARM_URL=self.gw.url, KSWARM_TOKEN=self.gw.operator_token)
        argv = [sys.executable, "-m", "orchestrator.supervisor", "-f", str(self.spec_path)]
        argv += [
            "--backend",
            "process",
            "--socket",
            str(self.gw.socket_path),
            "--redis-url",
            self.gw.redis_url,
        ]
        argv += ["--heartbeat-ttl", str(self.ttl)]
        with open(self.gw.home.parent / "supervisor.log", "ab") as log:
            self.proc = subprocess.Popen(argv, env=env, stdout=log, stderr=log, cwd=REPO)

    def kill(self) -> None:
        """SIGKILL, by pid: no clean-up of any kind runs (its heartbeat is left to expire)."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def log(self) -> str:
        path = self.gw.home.parent / "supervisor.log"
        return path.read_text() if path.exists() else ""

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        from orchestrator.swarm_dir.provision import SwarmLayout

        layout = SwarmLayout(self.gw.home)
        stop_swarm(layout, make_runtime("process", layout, self.spec), purge=True)


@contextmanager
def ui_session(gw: GatewayThread) -> Iterator[Any]:
    """An httpx client logged in to /ui through the form (cookie session); ``.csrf`` holds its token."""
    import re

    import httpx

    with httpx.Client(base_url=gw.url, timeout=60) as client:
        assert client.post("/ui/login", data={"token": gw.operator_token}).status_code == 303
        page = client.get("/ui/agents", headers={"Accept": "text/html"}).text
        match = re.search(r'<meta name="csrf-token" content="([^"]+)">', page)
        assert match, "no CSRF token on the page"
        client.csrf = match.group(1)  # type: ignore[attr-defined]
        yield client
