"""Spawn benchmark: 16 agents on the Docker backend, ``kswarm up`` vs 16 bare ``docker run``.

Both sides run the same command (``python -m agents``, host-shared mode from the empty image) and are
timed the same way: from the first action until every agent's heartbeat has reached the gateway. The
kswarm side includes what ``kswarm up`` does per agent (identity, token, dirs, volumes, confinement).

    .venv/bin/python bench/spawn.py [--agents 16]

Needs a Docker daemon (infra/ci/dockerd-start.sh prints a DOCKER_HOST for one).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import _common  # noqa: F401  (sys.path: the tree first, then tests/ for kstest)

from gateway.client.http import GatewayClient, GatewayTarget
from kstest.gateway import GatewayProcess
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.runtime.base import project_root, python_paths
from orchestrator.runtime.docker import HOST_SHARED, ensure_empty_image
from orchestrator.spec import parse_spec
from orchestrator.supervisor.main import Supervisor, stop_swarm


def wait_heartbeats(client: GatewayClient, names: list[str], since: float, timeout: float = 300) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        beats = {a["name"]: a.get("last_heartbeat") or 0 for a in client.agents()}
        if all(beats.get(n, 0) > since for n in names):
            return time.time()
        time.sleep(0.05)
    raise TimeoutError(f"not all of {names} heartbeat within {timeout}s")


def bench_kswarm(gw: GatewayProcess, home: Path, n: int) -> float:
    spec = parse_spec(
        f"swarm: benchk\nbackend: docker\nagents:\n  - pattern: k-{{i}}\n    count: {n}\n"
        "lifecycle: {reconcile_s: 0.2}\n"
    )
    names = [a.name for a in spec.expand()]
    sup = Supervisor(spec, "docker", home, gw.url, gw.operator_token, gw.socket_path)
    stop = threading.Event()
    client = GatewayClient(GatewayTarget(token=gw.operator_token, url=gw.url))
    t0 = time.time()
    thread = threading.Thread(target=sup.run, args=(stop,), daemon=True)
    thread.start()
    try:
        return wait_heartbeats(client, names, t0) - t0
    finally:
        stop.set()
        thread.join(30)
        stop_swarm(sup.layout, sup.runtime, purge=True)
        client.close()


def bench_bare(gw: GatewayProcess, work: Path, n: int) -> float:
    names = [f"b-{i}" for i in range(1, n + 1)]
    mounts: list[str] = []
    shared = [Path(p) for p in HOST_SHARED if Path(p).exists()]
    shared += [p for p in [*python_paths(), project_root()] if not any(p.is_relative_to(s) for s in shared)]
    for p in shared:
        mounts += ["-v", f"{p}:{p}:ro"]
    homes = []
    for i, name in enumerate(names):  # identities are made beforehand: not part of a bare docker run
        home = work / name
        home.mkdir(parents=True)
        (home / "token").write_text(gw.add_principal(name) + "\n")
        dirs = [home / d for d in ("work", "memory", "history")]
        for d in dirs:
            d.mkdir()
        for p in (home, home / "token", *dirs):
            os.chown(p, 30000 + i, 30000 + i)
        homes.append(home)
    client = GatewayClient(GatewayTarget(token=gw.operator_token, url=gw.url))
    t0 = time.time()
    try:
        for i, (name, home) in enumerate(zip(names, homes, strict=True)):
            subprocess.run(
                ["docker", "run", "-d", "--name", f"bench-bare-{name}", "--network", "none",
                 "--user", f"{30000 + i}:{30000 + i}", *mounts,
                 "-v", f"{gw.socket_path.parent}:/kswarm/run:ro", "-v", f"{home}:/kswarm/home",
                 "-e", f"KSWARM_AGENT={name}", "-e", "KSWARM_GATEWAY_SOCKET=/kswarm/run/gateway.sock",
                 "-e", "KSWARM_TOKEN_FILE=/kswarm/home/token", "-e", "KSWARM_HEARTBEAT_S=5",
                 "-e", "KSWARM_WORK=/kswarm/home/work", "-e", "KSWARM_MEMORY=/kswarm/home/memory",
                 "-e", "KSWARM_HISTORY=/kswarm/home/history",
                 "kswarm/empty", sys.executable, "-m", "agents"],
                check=True, capture_output=True,
            )  # fmt: skip
        return wait_heartbeats(client, names, t0) - t0
    finally:
        for name in names:
            subprocess.run(["docker", "rm", "-f", f"bench-bare-{name}"], capture_output=True)
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=16)
    args = parser.parse_args()
    import docker

    ensure_empty_image(docker.from_env())
    tmp = Path(tempfile.mkdtemp(prefix="ksb"))
    redis = EmbeddedRedis(tmp / "r")
    gw = GatewayProcess(tmp / "gw", redis.ensure_running(), swarm="bench")
    gw.start()
    try:
        bare = bench_bare(gw, tmp / "bare", args.agents)
        kswarm = bench_kswarm(gw, tmp / "home", args.agents)
    finally:
        gw.stop()
        redis.release()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"agents: {args.agents}")
    print(f"kswarm up -> all heartbeating: {kswarm:.2f} s")
    print(f"bare docker run -> all heartbeating: {bare:.2f} s")
    print(f"ratio kswarm / bare: {kswarm / bare:.2f}")


if __name__ == "__main__":
    main()
