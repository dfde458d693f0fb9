"""Helpers for the orchestrator suites: a swarm under test, waiting, Docker daemon discovery, and
the agents' processes counted independently of the orchestrator's records."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
from pathlib import Path
from typing import TypeVar

import yaml

from gateway.client.http import GatewayClient, GatewayTarget
from kstest.gateway import GatewayProcess
from kstest.waiting import wait_for
from orchestrator.runtime.process import proc_env
from orchestrator.spec import SwarmSpec, parse_spec
from orchestrator.supervisor.main import Supervisor
from orchestrator.supervisor.reconcile import AgentRecord, load_record
from orchestrator.swarm_dir.provision import SwarmLayout

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")

FAST_LIFECYCLE = {
    "reconcile_s": 0.2,
    "backoff_base_s": 0.2,
    "backoff_max_s": 1.0,
    "crash_loop_after": 3,
    "crash_window_s": 30,
    "stable_after_s": 30,
    "stall_after_s": 30,
}


def make_spec(agents_yaml: str, extra: str = "", **lifecycle: float) -> SwarmSpec:
    """A spec with a unique swarm name (Docker objects are named after it) and a fast lifecycle."""
    timing = yaml.safe_dump({"lifecycle": {**FAST_LIFECYCLE, **lifecycle}})
    # A 1 s heartbeat also bounds the inbox long-poll the gateway waits for when it shuts down.
    defaults = "defaults: {runtime: {heartbeat_s: 1}}\n"
    return parse_spec(f"swarm: t{secrets.token_hex(3)}\n{defaults}agents:\n{agents_yaml}\n{timing}\n{extra}")


class SwarmUnderTest:
    """A supervisor on a real gateway, in a thread (or a subprocess, to kill it like a crash)."""

    def __init__(self, gateway: GatewayProcess, home: Path, spec: SwarmSpec, backend: str) -> None:
        self.gateway = gateway
        self.home = home
        self.spec = spec
        self.backend = backend
        self.layout = SwarmLayout(home)
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.supervisor: Supervisor | None = None
        self.client = GatewayClient(GatewayTarget(token=gateway.operator_token, url=gateway.url))

    def make_supervisor(self) -> Supervisor:
        return Supervisor(
            self.spec,
            self.backend,
            self.home,
            self.gateway.url,
            self.gateway.operator_token,
            self.gateway.socket_path,
            # As `kswarm up` does: the supervisor publishes to the gateway's Redis, where the gateway
            # computes each agent's liveness (what `kswarm ps` shows).
            redis_url=self.gateway.redis_url,
        )

    def start_thread(self) -> None:
        self.supervisor = self.make_supervisor()
        self.stop_event.clear()
        self.thread = threading.Thread(target=self.supervisor.run, args=(self.stop_event,), daemon=True)
        self.thread.start()

    def stop_thread(self) -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(30)
            self.thread = None

    def start_subprocess(self, spec_path: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KSWARM_")}
        env.update(
            KSWARM_HOME=str(self.home), KSWARM_URL=self.gateway.url, KSWARM_TOKEN=self.gateway.operator_token
        )
        self.home.mkdir(parents=True, exist_ok=True)
        log = open(self.home / "supervisor.log", "ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "orchestrator.supervisor",
                "-f",
                str(spec_path),
                "--backend",
                self.backend,
                "--socket",
                str(self.gateway.socket_path),
                "--redis-url",
                self.gateway.redis_url,
            ],
            env=env,
            stdout=log,
            stderr=log,
            cwd=REPO,
        )
        log.close()

    def record(self, name: str) -> AgentRecord:
        return load_record(self.layout, name, self.backend)

    def heartbeat(self, name: str) -> float | None:
        return {a["name"]: a.get("last_heartbeat") for a in self.client.agents()}.get(name)

    def wait_heartbeating(self, names: list[str], since: float = 0.0, timeout: float = 30.0) -> None:
        def ok() -> bool:
            beats = {a["name"]: a.get("last_heartbeat") for a in self.client.agents()}
            return all((beats.get(n) or 0) > since for n in names)

        wait_for(ok, timeout, f"heartbeats from {names}")

    def ops_texts(self) -> list[str]:
        return [m["text"] for m in self.client.history("ops", limit=200)]

    def close(self) -> None:
        self.stop_thread()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        runtime = (self.supervisor or self.make_supervisor()).runtime
        from orchestrator.supervisor.main import stop_swarm

        stop_swarm(self.layout, runtime, purge=True)
        self.client.close()


def docker_available() -> tuple[bool, str]:
    """Is a Docker daemon reachable; if not, try to start the CI one (infra/ci/dockerd-start.sh)."""
    import docker

    try:
        docker.from_env().ping()
        return True, ""
    except Exception as exc:
        first = str(exc)
    script = REPO / "infra" / "ci" / "dockerd-start.sh"
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        return False, f"no Docker daemon ({first}); dockerd-start.sh failed: {done.stderr.strip()[-500:]}"
    os.environ["DOCKER_HOST"] = done.stdout.strip().splitlines()[-1]
    try:
        docker.from_env().ping()
        return True, ""
    except Exception as exc:
        return False, f"dockerd started but does not answer: {exc}"


def agent_pid(swarm: SwarmUnderTest, name: str) -> int:
    """The host pid of the agent's main process (for docker: the container's init process)."""
    status = swarm.supervisor.runtime.status(name) if swarm.supervisor else None
    assert status is not None and status.running, f"{name} not running"
    if swarm.backend == "process":
        return int(status.ref)
    import docker

    return docker.from_env().containers.get(status.ref).attrs["State"]["Pid"]


def running_copies(swarm: SwarmUnderTest, name: str) -> int:
    """How many instances of the agent exist, counted independently of the orchestrator's records."""
    if swarm.backend == "docker":
        import docker

        found = docker.from_env().containers.list(
            filters={"label": [f"kswarm.swarm={swarm.spec.swarm}", f"kswarm.agent={name}"]}
        )
        return len(found)
    # The roots of the agent's process trees: in the namespace sandbox one instance is several processes
    # with its environment (bubblewrap's monitor and init, then the agent), a duplicate is another tree.
    ours = {
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and _is_agent(proc_env(int(entry.name)), swarm, name)
    }
    return sum(1 for pid in ours if _parent_of(pid) not in ours)


def _is_agent(env: dict[str, str], swarm: SwarmUnderTest, name: str) -> bool:
    return env.get("KSWARM_AGENT") == name and env.get("KSWARM_SWARM") == swarm.spec.swarm


def _parent_of(pid: int) -> int | None:
    fields = proc_stat(Path(f"/proc/{pid}")).split()
    return int(fields[1]) if len(fields) > 1 else None


def proc_stat(path: Path) -> str:
    """State, ppid, ... of /proc/<pid> ('' once gone)."""
    try:
        raw = (path / "stat").read_text()
    except OSError:
        return ""
    return raw[raw.rindex(")") + 2 :]
