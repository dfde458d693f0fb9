"""Scale benchmark: N agents each holding a blocking inbox wait while one poster posts with mentions.

Run: ``.venv/bin/python bench/scale.py`` (starts its own Redis and gateway; N in {64, 128, 256, 512},
20 s each by default; ``--agents 64 256 --seconds 10`` for a shorter run).

Each agent holds one HTTP connection and loops on ``GET /api/inbox?wait=10`` (the server-side blocking
wait), in a process separate from the gateway and from the poster. The poster posts ``--rate`` msg/s
into #general, each mentioning one random agent. Printed per N: posts acked (201) and refused, inbox
errors, acked messages delivered to their agent, post→inbox p50/p99 (server accept → the waiting agent
has it), the gateway's and Redis's RSS and Redis's connected clients, sampled mid-run. The sender's
rate limit is raised for the poster (it posts 100/s by design) and the bench says so.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing
import random
import shutil
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event as EventType
from pathlib import Path

import httpx
import redis as redis_sync
from _common import ms, pct
from redis.asyncio import Redis

from gateway.client.target import auth_headers
from gateway.principals import PrincipalKind, PrincipalStore
from kstest.gateway import GatewayProcess
from orchestrator.local.embedded_redis import EmbeddedRedis

INBOX_WAIT_S = 10


def waiters_process(url: str, tokens: list[str], stop: EventType, out: Connection) -> None:
    """The agents: one connection each, a blocking inbox wait in a loop until ``stop`` is set.

    N agents share this one process and its one core, where in a swarm each is a process of its own:
    so the client here is aiohttp on uvloop, a third of httpx's CPU per request. With httpx, the N
    waits that end together cost this process alone ~0.6 ms each, and deliveries queued behind them
    here, showing as the gateway's tail (docs/performance.md, "Scale")."""
    import aiohttp
    import uvloop

    got: list[tuple[str, float, float]] = []  # (message id, post→inbox seconds, posted at)
    errors: list[str] = []

    async def agent(http: aiohttp.ClientSession) -> None:
        last = False
        while not last:
            # Once stopped, one more read that does not wait: a post that landed between this agent's
            # last wait and the stop is in its inbox, not lost (and counts with its latency).
            last = stop.is_set()
            try:
                wait = 0 if last else INBOX_WAIT_S
                async with http.get("/api/inbox", params={"wait": str(wait)}) as reply:
                    if reply.status != 200:
                        errors.append(f"{reply.status} {(await reply.text())[:100]}")
                        continue
                    items = (await reply.json())["items"]
            except (aiohttp.ClientError, TimeoutError) as exc:
                errors.append(repr(exc))
                await asyncio.sleep(0.1)
                continue
            now = time.time()
            got.extend((i["message_id"], now - i["ts"], i["ts"]) for i in items)

    async def main() -> None:
        clients = [
            aiohttp.ClientSession(
                base_url=url,
                headers=auth_headers(token),
                connector=aiohttp.TCPConnector(limit=1),
                timeout=aiohttp.ClientTimeout(total=60),
            )
            for token in tokens
        ]
        # The measuring side's own GC passes would show as the gateway's tail (a full pass over this
        # process's heap, N clients included, took 110-200 ms); as the gateway does, keep the heap that
        # lives for the whole run out of them.
        gc.collect()
        gc.freeze()
        try:
            await asyncio.gather(*(agent(http) for http in clients))
        finally:
            await asyncio.gather(*(http.close() for http in clients))

    uvloop.run(main())
    out.send((got, errors))
    out.close()


async def post_at_rate(
    url: str, token: str, names: list[str], rate: float, seconds: float
) -> tuple[set[str], int]:
    """Post ``rate`` msg/s for ``seconds``; returns the acked ids and how many posts failed."""
    acked: set[str] = set()
    failed = 0
    headers = auth_headers(token)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:

        async def post(text: str) -> None:
            nonlocal failed
            try:
                reply = await http.post("/api/channels/general/messages", json={"text": text})
            except httpx.HTTPError:
                failed += 1
                return
            if reply.status_code == 201:
                acked.add(reply.json()["id"])
            else:
                failed += 1

        start, sent, in_flight = time.monotonic(), 0, set()
        while time.monotonic() - start < seconds:
            await asyncio.sleep(max(0, start + sent / rate - time.monotonic()))
            task = asyncio.create_task(post(f"@{random.choice(names)} kernel {sent} is ready for review"))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            sent += 1
        await asyncio.gather(*in_flight)
    return acked, failed


async def create_agents(redis_url: str, names: list[str]) -> list[str]:
    redis = Redis.from_url(redis_url, decode_responses=True)
    try:
        store = PrincipalStore(redis, "test")
        return [(await store.create(n, PrincipalKind.agent))[1] for n in names]
    finally:
        await redis.aclose()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def gateway_metric(gw: GatewayProcess, name: str) -> float:
    headers = auth_headers(gw.operator_token)
    try:
        text = httpx.get(f"{gw.url}/metrics", headers=headers, timeout=30).text
    except httpx.TimeoutException:  # a gateway busy accepting hundreds of agents: ask again
        return float("nan")
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")]
    return values[0] if values else float("nan")


def wait_for_waiters(gw: GatewayProcess, n: int, bound: float = 180.0) -> None:
    deadline = time.monotonic() + bound
    while not gateway_metric(gw, "kswarm_waiters") >= n:  # nan: not known yet
        if time.monotonic() > deadline:
            raise SystemExit(f"only {gateway_metric(gw, 'kswarm_waiters'):.0f} of {n} agents ever waited")
        time.sleep(0.2)


def one_size(gw: GatewayProcess, redis_url: str, n: int, rate: float, seconds: float) -> dict[str, object]:
    names = [f"scale{n}-{i}" for i in range(n)]
    tokens = asyncio.run(create_agents(redis_url, names))
    poster = gw.add_principal(f"poster{n}")
    spawn = multiprocessing.get_context("spawn")
    receive, send = spawn.Pipe(duplex=False)
    stop = spawn.Event()
    agents = spawn.Process(target=waiters_process, args=(gw.url, tokens, stop, send), daemon=True)
    agents.start()
    wait_for_waiters(gw, n)  # the agents' process starts slowly on a loaded machine: post once all wait

    sample: dict[str, float] = {}

    async def sampled_post() -> tuple[set[str], int]:
        posting = asyncio.create_task(post_at_rate(gw.url, poster, names, rate, seconds))
        await asyncio.sleep(seconds / 2)
        admin = redis_sync.Redis.from_url(redis_url)
        try:
            sample["redis_clients"] = int(admin.info("clients")["connected_clients"]) - 1
            sample["redis_rss"] = int(admin.info("memory")["used_memory_rss"]) / 2**20
        finally:
            admin.close()
        assert gw.proc is not None
        sample["gateway_rss"] = rss_mb(gw.proc.pid)
        return await posting

    acked, failed = asyncio.run(sampled_post())
    time.sleep(2)  # what was posted last reaches its waiter
    stop.set()  # each agent ends after its current wait (<= INBOX_WAIT_S)
    got, errors = receive.recv()
    agents.join(60)
    delivered = {mid for mid, _, _ in got} & acked
    latencies = [lat for mid, lat, _ in got if mid in acked]
    # Where the tail comes from: the slowest 1 % spread over the run (a per-message cost) or bunched
    # into a few 250 ms windows (stalls: a GC pass, the scheduler, a burst of re-armed waits).
    slow = [ts for mid, lat, ts in got if mid in acked and lat >= pct(latencies, 99)]
    bursts = len({int(ts * 4) for ts in slow})
    return {
        "n": n,
        "acked": len(acked),
        "failed": failed,
        "errors": len(errors),
        "delivered": len(delivered),
        "p50": pct(latencies, 50),
        "p99": pct(latencies, 99),
        "slow": len(slow),
        "bursts": bursts,
        "first_error": errors[0] if errors else "",
        **sample,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[64, 128, 256, 512])
    parser.add_argument("--rate", type=float, default=100, help="posts per second (each mentions one agent)")
    parser.add_argument("--seconds", type=float, default=20, help="posting time per N")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="ksc"))
    redis_server = EmbeddedRedis(tmp / "r")
    url = redis_server.ensure_running()
    gw = GatewayProcess(
        tmp / "home",
        url,
        extra_env={"KSWARM_GATEWAY_RATE_LIMIT_PER_SEC": "0"},  # the poster posts 100/s on purpose
    )
    try:
        gw.start(timeout=180)  # a loaded machine imports slowly
        print(f"gateway {gw.url} (own process); rate limit disabled for the bench (the poster posts 100/s)")
        print(f"{args.rate:.0f} msg/s for {args.seconds:.0f} s per N; agents wait {INBOX_WAIT_S} s per call")
        for n in args.agents:
            r = one_size(gw, url, n, args.rate, args.seconds)
            print(
                f"  N={r['n']:>3}: acked {r['acked']}, failed {r['failed']}, inbox errors {r['errors']}, "
                f"delivered {r['delivered']}/{r['acked']}, p50 {ms(r['p50'])} p99 {ms(r['p99'])} "
                f"(slowest {r['slow']} in {r['bursts']} windows of 250 ms), "
                f"gateway RSS {r['gateway_rss']:.0f} MB, Redis RSS {r['redis_rss']:.0f} MB, "
                f"Redis clients {r['redis_clients']:.0f}"
                + (f"; first error: {r['first_error']}" if r["first_error"] else "")
            )
    finally:
        gw.stop()
        redis_server.release()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
