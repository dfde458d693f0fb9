"""LLM proxy benchmark: the test upstream called directly vs through the gateway's /v1/messages.

Run: ``.venv/bin/python bench/proxy.py`` (starts its own Redis, test upstream and gateway as separate
processes on loopback; about half a minute). Requests alternate direct / proxied in the same run so
that both see the same machine load. Reported: p50/p99 latency of non-streaming requests, time to
the first streamed byte and to the end of a stream, and the same under concurrency, with the
proxy's added time (delta) and ratio. The upstream answers at once, so every added millisecond is
the proxy's: authentication, the budget check, the concurrency slot, forwarding and usage accounting.
``--baseline COMMIT`` also runs the gateway of that commit (its ``gateway`` package, ``git archive``d)
beside this tree's, on the same Redis and upstream, and alternates its requests with the others: the
before/after of a change, measured under the same load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _common import ROOT, baseline_tree, pct
from redis.asyncio import Redis

from gateway.client import GatewayClient, GatewayTarget
from gateway.principals import PrincipalKind, PrincipalStore
from kstest.gateway import free_port
from kstest.upstream import ScriptedUpstream, text_reply
from orchestrator.local.embedded_redis import EmbeddedRedis

REAL_KEY = "sk-ant-bench-0123456789abcdef0123456789abcdef"
# python -m gateway, as a separate process (every default plugin, the LLM proxy included).
LAUNCHER = """
from gateway.__main__ import main
main()
"""
# The same, under pyinstrument (sampling), its report written when the gateway stops (--profile).
PROFILED = """
import sys
from pyinstrument import Profiler
profiler = Profiler(interval=0.001)
profiler.start()
try:
    exec(sys.argv[1])
finally:
    profiler.stop()
    with open(sys.argv[2], "w") as out:
        out.write(profiler.output_text(unicode=True, show_all=False))
"""
BODY = {
    "model": "claude-sonnet-4-bench",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "Write a fused softmax kernel. " * 40}],
}


def start_gateway(
    home: Path, redis_url: str, upstream_url: str, port: int, profile: Path | None = None, tree: Path = ROOT
) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KSWARM_")}
    env.update(
        KSWARM_GATEWAY_REDIS_URL=redis_url,
        KSWARM_GATEWAY_HOME=str(home),
        KSWARM_GATEWAY_PORT=str(port),
        KSWARM_LLM_UPSTREAM_URL=upstream_url,
        KSWARM_LLM_API_KEY=REAL_KEY,
        PYTHONPATH=str(tree),
    )
    home.mkdir(parents=True, exist_ok=True)
    log = open(home / "gateway.log", "ab")
    argv = ["-c", PROFILED, LAUNCHER, str(profile)] if profile else ["-c", LAUNCHER]
    # From inside ``tree``: ``-c`` puts the working directory first on sys.path.
    proc = subprocess.Popen([sys.executable, *argv], env=env, stdout=log, stderr=log, cwd=tree)
    log.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError((home / "gateway.log").read_text())
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.05)
    raise RuntimeError("gateway did not come up")


async def agent_token(redis_url: str) -> str:
    redis = Redis.from_url(redis_url, decode_responses=True)
    try:
        return (await PrincipalStore(redis, "kswarm").create("bench-agent", PrincipalKind.agent))[1]
    finally:
        await redis.aclose()


async def one(client: httpx.AsyncClient, url: str, key: str, stream: bool) -> tuple[float, float]:
    """(time to the first body byte, time to the last) of one request, in seconds."""
    body = {**BODY, "stream": stream}
    started = time.perf_counter()
    first = None
    async with client.stream("POST", url, json=body, headers={"x-api-key": key}) as reply:
        async for _ in reply.aiter_raw():
            first = first or time.perf_counter()
        if reply.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {reply.status_code}")
    end = time.perf_counter()
    return (first or end) - started, end - started


async def run_pairs(
    targets: dict[str, tuple[str, str]], n: int, stream: bool, concurrency: int
) -> dict[str, list[tuple[float, float]]]:
    """n requests per target, alternating targets, from ``concurrency`` workers."""
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in targets}
    limits = httpx.Limits(max_connections=concurrency * 2 + 4, max_keepalive_connections=concurrency * 2 + 4)
    async with httpx.AsyncClient(timeout=60, limits=limits, trust_env=False) as client:

        async def worker(count: int) -> None:
            for _ in range(count):
                for name, (url, key) in targets.items():
                    results[name].append(await one(client, url, key, stream))

        for url, key in targets.values():  # warm-up: connections and caches
            for _ in range(20):
                await one(client, url, key, stream)
        await asyncio.gather(*(worker(n // concurrency) for _ in range(concurrency)))
    return results


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report(title: str, direct: list[float], proxy: list[float]) -> list[str]:
    rows = []
    for q in (50, 99):
        d, p = pct(direct, q), pct(proxy, q)
        rows.append(
            f"{title:<38} p{q:<3} direct {d * 1000:8.2f} ms   proxy {p * 1000:8.2f} ms   "
            f"added {(p - d) * 1000:+8.2f} ms   ratio {p / d:5.2f}x"
        )
    return rows


async def bench(
    upstream: ScriptedUpstream,
    gateways: dict[str, tuple[subprocess.Popen[bytes], int]],
    token: str,
    n: int,
    one_client: bool,
) -> list[str]:
    """``gateways``: "proxy" (this tree) and, with --baseline, "baseline": (process, port)."""
    targets = {"direct": (f"{upstream.url}/v1/messages", REAL_KEY)}
    targets |= {name: (f"http://127.0.0.1:{port}/v1/messages", token) for name, (_, port) in gateways.items()}
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        f"{n} requests per target per scenario; upstream answers at once; loopback TCP; "
        f"{os.cpu_count()} CPUs, load average {load} at start",
        "",
    ]
    for label, stream, concurrency in (
        ("non-streaming, 1 client", False, 1),
        ("streaming, 1 client", True, 1),
        ("non-streaming, 16 clients", False, 16),
        ("streaming, 16 clients", True, 16),
    ):
        if one_client and concurrency > 1:
            continue
        started = time.perf_counter()
        cpu = {name: cpu_seconds(proc.pid) for name, (proc, _) in gateways.items()}
        res = await run_pairs(targets, n, stream, concurrency)
        wall = time.perf_counter() - started
        for name, (proc, _) in gateways.items():
            cpu[name] = cpu_seconds(proc.pid) - cpu[name]
        for name in gateways:
            title = label if name == "proxy" else f"{label} [{name}]"
            if stream:
                lines += report(
                    f"{title}: first byte", [r[0] for r in res["direct"]], [r[0] for r in res[name]]
                )
                lines += report(
                    f"{title}: whole stream", [r[1] for r in res["direct"]], [r[1] for r in res[name]]
                )
            else:
                lines += report(title, [r[1] for r in res["direct"]], [r[1] for r in res[name]])
        per_request = {name: c / (len(res[name]) + 20) * 1000 for name, c in cpu.items()}  # warm-ups too
        lines.append(
            f"{'':<38} ({sum(len(r) for r in res.values())} requests in {wall:.1f} s; gateway CPU per "
            "proxied request: " + ", ".join(f"{name} {ms:.2f} ms" for name, ms in per_request.items()) + ")"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="requests per target per scenario")
    parser.add_argument(
        "--profile",
        type=Path,
        help="run the gateway under pyinstrument (pip install pyinstrument), one client only, "
        "and write its report here",
    )
    parser.add_argument("--baseline", help="also run the gateway of this commit, alternating with this one")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="ksbp"))
    redis = EmbeddedRedis(home / "redis")
    redis_url = redis.ensure_running()
    upstream = ScriptedUpstream(api_key=REAL_KEY, process=True).start()
    upstream.script(default=text_reply("Here is a kernel: " + "tl.load(x) " * 20))
    gateways: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    try:
        port = free_port()
        gateways["proxy"] = (start_gateway(home, redis_url, upstream.url, port, args.profile), port)
        if args.baseline:
            tree = baseline_tree(args.baseline, home / "baseline-tree")
            other = free_port()
            gateways["baseline"] = (
                start_gateway(home / "baseline", redis_url, upstream.url, other, tree=tree),
                other,
            )
        token = asyncio.run(agent_token(redis_url))
        lines = asyncio.run(bench(upstream, gateways, token, args.requests, bool(args.profile)))
        with GatewayClient(GatewayTarget(token=token, url=f"http://127.0.0.1:{port}")) as client:
            usage = client.get("/api/usage")
        lines.append("")
        lines.append(f"usage recorded for the agent: {usage['agents']['bench-agent']['requests']} requests")
        print("\n".join(lines))
    finally:
        for proc, _ in gateways.values():
            proc.terminate()
            proc.wait(120 if args.profile else 15)
        upstream.close()
        redis.release()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
