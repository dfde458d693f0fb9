"""Chat benchmark: post→inbox latency under load, and MCP overhead against a bare endpoint.

Run: ``.venv/bin/python bench/chat.py`` (starts its own Redis and gateway; about a minute).

1. 16 and 64 agents each wait on their inbox (the server-side blocking wait) while posters put
   ~200 messages/s into one shared channel, each mentioning one agent: p50/p99 post→inbox latency.
2. 16 senders posting back to back: posts/s to the bare endpoint, over REST and over MCP (ratios).
3. The round trip of an MCP ``chat_post`` (official client: the 2025-11-25 handshake era, as Claude
   Code speaks it, and the SDK's 2026-07-28 single-exchange mode) against a bare FastAPI JSON endpoint
   served the same way (uvicorn, loopback), in the same run: the ratio is the gateway's overhead.
   Where that overhead goes: ``bench/mcp_profile.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from pathlib import Path

import httpx
import httpx2
from _common import ROOT, ms, pct, wait_for_waiters
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.client import AsyncGatewayClient, GatewayCallError, GatewayTarget
from gateway.client.target import auth_headers
from kstest.gateway import GatewayProcess, free_port
from kstest.mcp_client import call, mcp_session
from orchestrator.local.embedded_redis import EmbeddedRedis, find_redis_server

BARE_APP = """
from fastapi import FastAPI
from pydantic import BaseModel
app = FastAPI()
class Post(BaseModel):
    channel: str
    text: str
@app.post("/post")
async def post(body: Post) -> dict:
    return {"id": "1-0", "channel": body.channel, "mentions": []}
"""


def waiters_process(url: str, tokens: list[str], seconds: float, out: Connection) -> None:
    """The agents' side, in its own process so that the poster's CPU does not delay the waiters."""
    latencies: list[float] = []
    errors: list[str] = []

    async def wait_loop(token: str, deadline: float) -> None:
        # One client (one connection) per agent, as real agents have.
        async with AsyncGatewayClient(GatewayTarget(token=token, url=url)) as c:
            while time.monotonic() < deadline:
                try:
                    items = await c.inbox(wait=1, limit=100)
                except GatewayCallError as exc:
                    errors.append(exc.line())
                    continue
                now = time.time()
                latencies.extend(now - item["ts"] for item in items)

    async def main() -> None:
        deadline = time.monotonic() + seconds
        await asyncio.gather(*(wait_loop(t, deadline) for t in tokens))

    asyncio.run(main())
    out.send((latencies, errors))
    out.close()


async def post_at_rate(
    gw: GatewayProcess, token: str, names: list[str], rate: float, seconds: float
) -> tuple[float, int]:
    """Post ``rate`` messages/s for ``seconds``, each mentioning one agent; returns the achieved rate
    and how many posts the gateway refused (the sender's rate limit, ...)."""
    refused = 0
    async with AsyncGatewayClient(GatewayTarget(token=token, url=gw.url), max_connections=32) as client:

        async def post(text: str) -> None:
            nonlocal refused
            try:
                await client.post("general", text)
            except GatewayCallError:
                refused += 1

        interval = 1 / rate
        start = time.monotonic()
        sent = 0
        in_flight: set[asyncio.Task] = set()
        while time.monotonic() - start < seconds:
            await asyncio.sleep(max(0, start + sent * interval - time.monotonic()))
            task = asyncio.create_task(post(f"@{random.choice(names)} kernel {sent} is ready for review"))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            sent += 1
        await asyncio.gather(*in_flight)
        return sent / (time.monotonic() - start), refused


async def throughput(
    gw: GatewayProcess, bare_url: str, senders: int, seconds: float
) -> dict[str, tuple[float, int]]:
    """``senders`` agents, one connection (or MCP session) each, posting back to back for ``seconds``
    (the rate limit is raised for the bench), to the bare endpoint, over REST and over MCP (the
    2025-11-25 era, as Claude Code speaks it), one after the other in the same run: accepted posts per
    second, and how many were refused or failed."""
    tokens = [gw.add_principal(f"sender{i}") for i in range(senders)]
    out: dict[str, tuple[float, int]] = {}

    async def run(kind: str) -> None:
        accepted = refused = 0

        async def sender(i: int, token: str, deadline: float) -> None:
            nonlocal accepted, refused

            async def loop(post: Callable[[int], Awaitable[object]]) -> None:
                nonlocal accepted, refused
                n = 0
                while time.monotonic() < deadline:
                    n += 1
                    try:
                        await post(n)
                        accepted += 1
                    except (GatewayCallError, httpx.HTTPError, RuntimeError):
                        refused += 1

            if kind == "bare":
                async with httpx.AsyncClient(base_url=bare_url) as client:

                    async def bare(n: int) -> object:
                        reply = await client.post("/post", json={"channel": "general", "text": f"t{i} {n}"})
                        return reply.raise_for_status()

                    await loop(bare)
            elif kind == "rest":
                async with AsyncGatewayClient(GatewayTarget(token=token, url=gw.url)) as client:
                    await loop(lambda n: client.post("general", f"t{i} {n}"))
            else:
                async with mcp_session(gw.url, token) as session:
                    await loop(lambda n: call(session, "chat_post", channel="general", text=f"t{i} {n}"))

        start = time.monotonic()
        await asyncio.gather(*(sender(i, t, start + seconds) for i, t in enumerate(tokens)))
        out[kind] = (accepted / (time.monotonic() - start), refused)

    for kind in ("bare", "rest", "mcp"):
        await run(kind)
    return out


def inbox_load(gw: GatewayProcess, n_agents: int, rate: float, seconds: float) -> list[float]:
    names = [f"bench{n_agents}-{i}" for i in range(n_agents)]
    tokens = [gw.add_principal(n) for n in names]
    poster = gw.add_principal(f"poster{n_agents}")
    receive, send = multiprocessing.Pipe(duplex=False)
    waiters = multiprocessing.get_context("spawn").Process(
        target=waiters_process,
        args=(gw.url, tokens, seconds + 12, send),  # + the time to start waiting
    )
    waiters.start()
    wait_for_waiters(gw.url, gw.operator_token, n_agents)  # every agent blocked in its inbox wait first
    achieved, refused = asyncio.run(post_at_rate(gw, poster, names, rate, seconds))
    latencies, errors = receive.recv()
    waiters.join(30)
    print(
        f"  {n_agents:>3} agents: {achieved:.0f} msg/s sustained for {seconds:.0f} s, "
        f"delivered {len(latencies)}, refused posts {refused}, inbox errors {len(errors)}"
    )
    return latencies


async def round_trips(gw: GatewayProcess, bare_url: str, n: int) -> dict[str, list[float]]:
    token = gw.add_principal("rtt")
    bare: list[float] = []
    rest: list[float] = []
    mcp: list[float] = []
    single: list[float] = []
    async with httpx.AsyncClient(base_url=bare_url) as client:
        for _ in range(20):
            await client.post("/post", json={"channel": "general", "text": "warm"})
        for i in range(n):
            t = time.perf_counter()
            (await client.post("/post", json={"channel": "general", "text": f"rt {i}"})).raise_for_status()
            bare.append(time.perf_counter() - t)
    async with AsyncGatewayClient(GatewayTarget(token=token, url=gw.url)) as gateway:
        for i in range(n):
            t = time.perf_counter()
            await gateway.post("general", f"rest {i}")
            rest.append(time.perf_counter() - t)
    async with mcp_session(gw.url, token) as session:
        for i in range(20):
            await call(session, "chat_post", channel="general", text=f"warm {i}")
        for i in range(n):
            t = time.perf_counter()
            await call(session, "chat_post", channel="general", text=f"mcp {i}")
            mcp.append(time.perf_counter() - t)
    async with (
        httpx2.AsyncClient(headers=auth_headers(token), timeout=60) as http,
        Client(streamable_http_client(f"{gw.url}/mcp", http_client=http), mode="2026-07-28") as client,
    ):
        for i in range(20):
            await client.call_tool("chat_post", {"channel": "general", "text": f"warm {i}"})
        for i in range(n):
            t = time.perf_counter()
            result = await client.call_tool("chat_post", {"channel": "general", "text": f"mcp26 {i}"})
            single.append(time.perf_counter() - t)
            assert not result.is_error, result
    return {"bare": bare, "rest": rest, "mcp": mcp, "mcp-2026": single}


def start_bare(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    (tmp / "bare_app.py").write_text(BARE_APP)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "bare_app:app", "--port", str(port), "--log-level", "warning"],
        cwd=tmp,
    )
    for _ in range(200):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200, help="messages per second into the channel")
    parser.add_argument("--seconds", type=float, default=8, help="load duration per agent count")
    parser.add_argument("--round-trips", type=int, default=300)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="ksb"))
    redis_server = EmbeddedRedis(tmp / "r")
    url = redis_server.ensure_running()
    gw = GatewayProcess(
        tmp / "home",
        url,
        extra_env={
            "KSWARM_GATEWAY_RATE_LIMIT_PER_SEC": "100000",
            "KSWARM_GATEWAY_RATE_LIMIT_BURST": "100000",
        },
    )
    bare_proc, bare_url = start_bare(tmp)
    try:
        gw.start()
        print(f"gateway {gw.url} (own process), {find_redis_server()}, {args.rate:.0f} msg/s target")
        print("post→inbox latency (server accept → delivered to the waiting agent):")
        rows = []
        for n in (16, 64):
            lat = inbox_load(gw, n, args.rate, args.seconds)
            rows.append((n, pct(lat, 50), pct(lat, 99)))
        for n, p50, p99 in rows:
            print(f"  {n:>3} agents: p50 {ms(p50)}  p99 {ms(p99)}")
        flows = asyncio.run(throughput(gw, bare_url, 16, args.seconds))
        print(
            f"16 concurrent senders, {args.seconds:.0f} s each "
            "(rate limit raised; client and server share the CPUs):"
        )
        for kind, label in (
            ("bare", "bare FastAPI JSON endpoint"),
            ("rest", "gateway REST post"),
            ("mcp", "gateway MCP chat_post"),
        ):
            rate, refused = flows[kind]
            print(
                f"  {label:<28}{rate:6.0f} posts/s, {refused} refused  ÷ bare 1/{flows['bare'][0] / rate:.1f}"
            )
        trips = asyncio.run(round_trips(gw, bare_url, args.round_trips))
        b50 = pct(trips["bare"], 50)
        print(f"round trip (median of {args.round_trips}, sequential, loopback):")
        for name, label in (
            ("bare", "bare FastAPI JSON endpoint   "),
            ("rest", "gateway REST post            "),
            ("mcp", "gateway MCP chat_post        "),
            ("mcp-2026", "  same, 2026-07-28 exchange  "),
        ):
            p50 = pct(trips[name], 50)
            print(f"  {label}{ms(p50)}  (p99 {ms(pct(trips[name], 99))})  ratio {p50 / b50:.1f}x")
    finally:
        gw.stop()
        bare_proc.terminate()
        bare_proc.wait(10)
        redis_server.release()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
