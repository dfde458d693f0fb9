"""The ``kswarm up`` penalty (issue 16): the gateway under ``kswarm up`` against ``python -m gateway``.

Three targets, started one after the other on the same machine, each on its own embedded Redis, each
under the same load from this process (a separate process from every gateway):

- ``gateway``: ``python -m gateway``;
- ``up``: ``kswarm up`` (no swarm);
- ``up -f``: ``kswarm up -f`` with ``--agents`` agents that only sleep (``command: [sleep, ...]``), so that
  the orchestrator has a swarm to supervise but the agents themselves add no load.

Per target: the gateway process's RSS after it idled (and the orchestrator's, for ``up -f``), then
``--waiters`` principals each holding a blocking inbox wait (one HTTP connection each) while a poster
mentions one of them at ``--rate`` messages per second for ``--seconds``: post -> inbox latency p50/p99
(the inbox item's accept time to its arrival here), errors, and RSS after the load.

    .venv/bin/python bench/up.py [--agents 64] [--waiters 64] [--rate 50] [--seconds 20] [--tree DIR]

``--tree DIR`` runs the targets from another checkout of kswarm (``git archive <rev> | tar -x -C DIR``),
e.g. the commit before the fix, for a before/after pair in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import _common
import httpx
from _common import pct

from gateway.client.home import GatewayInfo
from gateway.client.target import auth_headers
from kstest.gateway import free_port


@dataclass
class Result:
    target: str
    rss_idle_mb: float
    rss_loaded_mb: float
    orchestrator_mb: float | None
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    posted: int = 0

    def line(self) -> str:
        orch = f", orchestrator {self.orchestrator_mb:.0f} MB" if self.orchestrator_mb else ""
        return (
            f"{self.target:<8} RSS idle {self.rss_idle_mb:.0f} MB, loaded {self.rss_loaded_mb:.0f} MB{orch}; "
            f"post->inbox p50 {pct(self.latencies, 50) * 1000:.1f} ms, "
            f"p99 {pct(self.latencies, 99) * 1000:.1f} ms; "
            f"{len(self.latencies)}/{self.posted} delivered, {self.errors} errors"
        )


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def env_for(tree: Path | None, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KSWARM_") and k != "REDIS_URL"}
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    # Both targets get the same raised chat limits: the bench measures waits, not the rate limiter.
    env.update(KSWARM_HOME=str(home), KSWARM_GATEWAY_RATE_LIMIT_PER_SEC="10000")
    env.update(KSWARM_GATEWAY_RATE_LIMIT_BURST="10000", NO_COLOR="1", COLUMNS="200")
    return env


class Target:
    """One gateway started as a user would, stopped by its pid."""

    def __init__(self, kind: str, work: Path, tree: Path | None, agents: int) -> None:
        self.kind, self.tree, self.agents = kind, tree, agents
        self.home = work / kind.replace(" ", "").replace("-", "")
        self.home.mkdir(parents=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.redis_home = work / f"r-{self.home.name}"

    def start(self) -> None:
        env = env_for(self.tree, self.home)
        log = open(self.home.parent / f"{self.home.name}.log", "wb")
        if self.kind == "gateway":
            from orchestrator.local.embedded_redis import EmbeddedRedis

            self.redis = EmbeddedRedis(self.redis_home)
            env.update(
                KSWARM_GATEWAY_REDIS_URL=self.redis.ensure_running(),
                KSWARM_GATEWAY_HOME=str(self.home),
                KSWARM_GATEWAY_PORT=str(self.port),
            )
            argv = [sys.executable, "-m", "gateway"]
        else:
            argv = [str(Path(sys.executable).parent / "kswarm"), "up", "--home", str(self.home)]
            argv += ["--port", str(self.port)]
            if self.kind == "up -f":
                spec = self.home.parent / "bench-swarm.yaml"
                spec.write_text(
                    "swarm: bench\n"
                    "defaults: {runtime: {command: [sleep, '100000']}}\n"
                    f"agents:\n  - pattern: a-{{i}}\n    count: {self.agents}\n"
                    "pools: [{name: cpu, workers: 1}]\n"
                    "lifecycle: {stall_after_s: 100000}\n"
                )
                argv += ["-f", str(spec)]
        self.proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=_common.ROOT)

    def wait_ready(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None and self.proc.poll() is None, f"{self.kind} exited"
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        if self.kind == "up -f":  # every agent started
            records = self.home / "swarm" / "agents"
            while time.monotonic() < deadline:
                if len(list(records.glob("*.proc.json"))) >= self.agents:
                    return
                time.sleep(0.5)
            raise TimeoutError("the swarm's agents did not all start")

    def token(self) -> str:
        if self.kind == "gateway":
            return self._gateway_operator()
        return (self.home / "operator.token").read_text().strip()

    def _gateway_operator(self) -> str:
        from gateway.principals import PrincipalKind
        from kstest.gateway import _create_principal

        return asyncio.run(_create_principal(self.redis.url, "operator", PrincipalKind.operator, "kswarm"))

    def gateway_pid(self) -> int:
        assert self.proc is not None
        if self.kind == "gateway":
            return self.proc.pid
        info = GatewayInfo.read(self.home)
        assert info is not None
        return info.pid

    def orchestrator_pid(self) -> int | None:
        if self.kind != "up -f":
            return None
        info = json.loads((self.home / "swarm" / "swarm.json").read_text())
        return int(info["supervisor_pid"])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self.kind == "gateway":
            self.redis.release()


async def load(
    url: str, operator: str, waiters: int, rate: float, seconds: float
) -> tuple[list[float], int, int]:
    """Waiters each in a blocking inbox wait; one poster mentioning them; latencies, errors, posted."""
    op = auth_headers(operator)
    limits = httpx.Limits(max_connections=waiters + 8, max_keepalive_connections=waiters + 8)
    async with httpx.AsyncClient(base_url=url, headers=op, timeout=60, limits=limits) as admin:
        tokens = {}
        for i in range(waiters):
            name = f"w{i}-{random.randrange(1 << 30):x}"[:30]
            reply = await admin.post("/api/principals", json={"name": name, "kind": "agent"})
            reply.raise_for_status()
            tokens[name] = reply.json()["token"]
        latencies: list[float] = []
        errors = 0
        posted = 0
        done = asyncio.Event()

        async def wait_inbox(name: str, token: str) -> None:
            nonlocal errors
            headers = auth_headers(token)
            while not done.is_set():
                try:
                    reply = await admin.get("/api/inbox", params={"wait": 5}, headers=headers)
                    reply.raise_for_status()
                except httpx.HTTPError:
                    errors += 1
                    await asyncio.sleep(0.2)
                    continue
                now = time.time()
                latencies.extend(now - float(item["ts"]) for item in reply.json()["items"])

        tasks = [asyncio.create_task(wait_inbox(n, t)) for n, t in tokens.items()]
        await asyncio.sleep(1.0)  # every waiter blocked
        names = list(tokens)
        began = time.monotonic()
        while time.monotonic() - began < seconds:
            target = names[posted % len(names)]
            try:
                reply = await admin.post(
                    "/api/channels/general/messages", json={"text": f"@{target} ping {posted}"}
                )
                reply.raise_for_status()
            except httpx.HTTPError:
                errors += 1
            posted += 1
            await asyncio.sleep(max(0.0, began + posted / rate - time.monotonic()))
        await asyncio.sleep(2.0)  # the last ones arrive
        done.set()
        await asyncio.wait(tasks, timeout=10)
        for task in tasks:
            task.cancel()
        return latencies, errors, posted


def run_target(kind: str, work: Path, args: argparse.Namespace) -> Result:
    target = Target(kind, work, args.tree, args.agents)
    target.start()
    try:
        target.wait_ready()
        time.sleep(args.idle)
        pid = target.gateway_pid()
        idle = rss_mb(pid)
        orch = target.orchestrator_pid()
        latencies, errors, posted = asyncio.run(
            load(target.url, target.token(), args.waiters, args.rate, args.seconds)
        )
        loaded = rss_mb(pid)
        orch_mb = rss_mb(orch) if orch else None
        return Result(kind, idle, loaded, orch_mb, latencies, errors, posted)
    finally:
        target.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=64, help="Agents of the `up -f` swarm.")
    parser.add_argument("--waiters", type=int, default=64, help="Principals in a blocking inbox wait.")
    parser.add_argument("--rate", type=float, default=50.0, help="Posts per second.")
    parser.add_argument("--seconds", type=float, default=20.0, help="Length of the load.")
    parser.add_argument("--idle", type=float, default=10.0, help="Seconds idle before measuring RSS.")
    parser.add_argument("--tree", type=Path, help="Run the targets from this checkout instead.")
    parser.add_argument("--targets", default="gateway,up,up -f", help="Comma-separated: gateway, up, up -f.")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ksu"))
    results = []
    try:
        for kind in [t.strip() for t in args.targets.split(",") if t.strip()]:
            results.append(run_target(kind, work, args))
            print(results[-1].line(), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load_avg = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{time.strftime('%Y-%m-%d %H:%M')} load average {load_avg}; tree {args.tree or _common.ROOT}")
    base = next((r for r in results if r.target == "gateway"), None)
    for r in results:
        if base is not None and r is not base and base.latencies and r.latencies:
            print(
                f"{r.target} / gateway: RSS idle {r.rss_idle_mb / base.rss_idle_mb:.2f}x, "
                f"p99 {pct(r.latencies, 99) / pct(base.latencies, 99):.2f}x"
            )


if __name__ == "__main__":
    main()
