"""Where an MCP ``chat_post`` spends its time, next to a REST post and a bare FastAPI endpoint.

Run: ``.venv/bin/python bench/mcp_profile.py [-n 400] [--baseline COMMIT] [--profiler pyinstrument]
[--mention]`` (starts its own Redis; about a minute; ``pip install pyinstrument`` for the default
profiler; ``--mention``: every post names another agent, which gets it in its inbox).

Wall-clock ratios on a loaded 2-core machine move by 2× between runs; the CPU each request costs
does not (much). So one server process (uvloop, like ``python -m gateway``) serves the gateway and a
bare FastAPI app side by side, and this process makes N sequential calls per path: bare
``POST /post``, REST ``POST /api/channels/general/messages``, MCP ``chat_post`` through the official
SDK client (the 2025-11-25 handshake era Claude Code speaks, stateless, JSON responses), and the
same through the SDK's 2026-07-28 single-exchange mode. Per phase, both processes report their CPU
seconds (``time.process_time``) and a profile of exactly that phase; the server's samples are
attributed to ``PARTS`` (innermost match on the stack wins, so Redis time inside ``chat.post`` is
the post's, inside the token check the check's).

``--baseline COMMIT`` also serves the gateway of that commit (``git archive COMMIT gateway``, run
from a temporary tree with the same venv) in a second server process, and measures its REST and MCP
paths in the same run, interleaved with the current ones: the before/after ratio of a change.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import httpx2
from _common import ROOT, baseline_tree, ms
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

if TYPE_CHECKING:  # imported where used: a --baseline server process must import its own gateway
    from gateway.client import AsyncGatewayClient

# (part, path fragment of the file, function names or None for any): a sample is charged to the
# innermost frame on its stack that matches a rule; samples matching none are "other".
PARTS: list[tuple[str, str, tuple[str, ...] | None]] = [
    ("uvicorn + httptools (HTTP parse, socket I/O)", "uvicorn/", None),
    ("FastAPI/Starlette app stack + routing", "starlette/", None),
    ("FastAPI/Starlette app stack + routing", "fastapi/", None),
    ("token check (1 Redis round trip)", "gateway/auth.py", ("verify", "check")),
    ("REST route, deps, response model (ours)", "gateway/api.py", None),
    ("REST route, deps, response model (ours)", "gateway/deps.py", None),
    ("our MCP code (McpAuth, call_tool, tool fns)", "gateway/mcp_server.py", None),
    ("our MCP code (McpAuth, call_tool, tool fns)", "gateway/mcp_inline.py", None),
    ("SDK: session manager, per-request transport", "mcp/server/streamable_http_manager.py", None),
    ("SDK: transport (HTTP <-> JSON-RPC, streams)", "mcp/server/streamable_http.py", None),
    ("SDK: transport (HTTP <-> JSON-RPC, streams)", "mcp/server/transport_security.py", None),
    ("SDK: transport (HTTP <-> JSON-RPC, streams)", "mcp/server/_streamable_http_modern.py", None),
    ("SDK: dispatcher, runner, connection", "mcp/shared/", None),
    ("SDK: dispatcher, runner, connection", "mcp/server/runner.py", None),
    ("SDK: dispatcher, runner, connection", "mcp/server/connection.py", None),
    ("SDK: dispatcher, runner, connection", "mcp/server/request_state.py", None),
    ("SDK: dispatcher, runner, connection", "mcp/server/lowlevel/", None),
    ("SDK: OpenTelemetry span", "mcp/server/_otel.py", None),
    ("SDK: OpenTelemetry span", "opentelemetry/", None),
    ("SDK: MCPServer tool call", "mcp/server/mcpserver/", None),
    (
        "SDK: argument validation",
        "mcpserver/utilities/func_metadata.py",
        ("validate_arguments", "pre_parse_json"),
    ),
    (
        "SDK: result conversion + output validation",
        "mcpserver/utilities/func_metadata.py",
        ("convert_result",),
    ),
    ("SDK: anyio tasks/streams (per request)", "anyio/", None),
    ("chat.post (checks + Lua script, 2 round trips)", "gateway/chat.py", ("post", "post_dm")),
    ("background: search feeder (FTS5 index of each post)", "gateway/search/", None),
    ("background: monitor feeder", "gateway/monitor/", None),
    ("background: event hub (wakes waiters, SSE)", "gateway/events.py", None),
    ("background: jobs/tasks loops", "gateway/jobs/", None),
    ("background: jobs/tasks loops", "gateway/tasks/", None),
]
# Packages whose calls per request the cProfile mode counts (the request path's, mostly).
CALL_PACKAGES = (
    "starlette",
    "fastapi",
    "uvicorn",
    "opentelemetry",
    "mcp",
    "anyio",
    "pydantic",
    "redis",
    "gateway",
)
IDLE_FUNCTIONS = {"run_until_complete", "run_forever", "select", "poll", "run", "recv", "_recv_bytes"}

BARE_APP_SOURCE = """
from fastapi import FastAPI
from pydantic import BaseModel

bare = FastAPI()


class Post(BaseModel):
    channel: str
    text: str


@bare.post("/post")
async def post(body: Post) -> dict:
    return {"id": "1-0", "channel": body.channel, "mentions": []}
"""


class PhaseProfiler:
    """One phase's profile in the process that runs it: pyinstrument, cProfile or none."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.profiler: Any = None
        self.cpu0 = 0.0
        self.dumps = 0

    def start(self) -> None:
        if self.kind == "pyinstrument":
            from pyinstrument import Profiler

            self.profiler = Profiler(interval=0.0002, async_mode="disabled")
            self.profiler.start()
        elif self.kind == "cprofile":
            import cProfile

            self.profiler = cProfile.Profile()
            self.profiler.enable()
        self.cpu0 = time.process_time()

    def stop(self) -> tuple[float, dict[str, float]]:
        """CPU seconds of the phase, and profiled seconds per part."""
        cpu = time.process_time() - self.cpu0
        if self.kind == "pyinstrument":
            return cpu, attribute(self.profiler.stop().frame_records)
        if self.kind == "cprofile":
            import pstats

            self.profiler.disable()
            stats: Any = pstats.Stats(self.profiler)
            if dump := os.environ.get("KS_BENCH_DUMP"):  # a file prefix: each stop appends its stats
                self.dumps += 1
                stats.dump_stats(f"{dump}-{os.getpid()}-{self.dumps}.pstats")
            # Function calls on the request path do not depend on the machine's load (background loops do).
            calls: Counter[str] = Counter({"function calls": stats.total_calls})
            for (path, _, _), (primitive, *_) in stats.stats.items():
                calls[next((f"calls: {p}" for p in CALL_PACKAGES if f"/{p}/" in path), "calls: other")] += (
                    primitive
                )
            return cpu, dict(calls)
        return cpu, {}


def attribute(records: list[tuple[list[str], float]]) -> dict[str, float]:
    parts: Counter[str] = Counter()
    unmatched: Counter[str] = Counter()  # the innermost frames of "other", for --show-other
    for stack, seconds in records:
        part = "other"
        for frame in reversed(stack):
            function, _, rest = frame.partition("\x00")
            path = rest.split("\x00", 1)[0]
            found = next(
                (
                    name
                    for name, fragment, fns in PARTS
                    if fragment in path and (fns is None or function in fns)
                ),
                None,
            )
            if found is not None:
                part = found
                break
        else:
            innermost = stack[-1].partition("\x00")[0] if stack else ""
            if innermost in IDLE_FUNCTIONS or len(stack) <= 3:
                part = "idle (event loop waiting) / unattributed C"
            else:
                unmatched[" <- ".join(short(frame) for frame in reversed(stack[-6:]))] += seconds
        parts[part] += seconds
    if os.environ.get("KS_BENCH_SHOW_OTHER"):
        for where, seconds in unmatched.most_common(8):
            print(f"    other {seconds * 1e3:7.1f} ms  {where}", file=sys.stderr)
    return dict(parts)


def matches(path: str, function: str, where: str, functions: tuple[str, ...] | None) -> bool:
    return where in path and (functions is None or function in functions)


def short(frame: str) -> str:
    function, _, rest = frame.partition("\x00")
    return f"{function}@{rest.split(chr(0), 1)[0].rsplit('/', 1)[-1]}"


def server_process(
    tree: str,
    redis_url: str,
    swarm: str,
    home: str,
    ports: tuple[int, int | None],
    profiler: str,
    without: tuple[str, ...],
    control: Connection,
) -> None:
    """A gateway (from ``tree``) and optionally the bare app on one uvloop, profiled on command."""
    sys.path.insert(0, tree)
    import uvicorn
    import uvloop

    from gateway.app import create_app
    from gateway.config import GatewaySettings
    from gateway.plugins import default_plugins
    from gateway.server import serve

    assert Path(sys.modules["gateway"].__file__ or "").is_relative_to(tree), "gateway imported from elsewhere"
    settings = GatewaySettings(
        redis_url=redis_url,
        home=Path(home),
        port=ports[0],
        swarm=swarm,  # each server its own swarm: its feeders see only its own posts
        rate_limit_per_sec=1e6,  # the bench posts faster than an agent may; raised explicitly
        rate_limit_burst=1_000_000,
    )

    async def main() -> None:
        app = create_app(settings, plugins=[p for p in default_plugins() if p.name not in without])
        ready, stop = asyncio.Event(), asyncio.Event()
        tasks = [asyncio.create_task(serve(app, settings, ready=ready, stop=stop))]
        bare = None
        if ports[1] is not None:
            namespace: dict[str, Any] = {}
            exec(BARE_APP_SOURCE, namespace)  # the bare app, the same as bench/chat.py's
            bare = uvicorn.Server(uvicorn.Config(namespace["bare"], port=ports[1], log_level="warning"))
            tasks.append(asyncio.create_task(bare.serve()))
        await ready.wait()
        while bare is not None and not bare.started:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        loop = asyncio.get_running_loop()
        control.send("ready")
        phase = PhaseProfiler(profiler)
        while True:
            command = await loop.run_in_executor(None, control.recv)
            if command == "start":
                phase.start()
                control.send("started")
            elif command == "stop":
                control.send(phase.stop())
            else:
                break
        stop.set()
        if bare is not None:
            bare.should_exit = True
        await asyncio.gather(*tasks)

    uvloop.run(main())


class Server:
    """A server process, its URLs and its control pipe."""

    def __init__(
        self,
        tree: Path,
        redis_url: str,
        swarm: str,
        home: Path,
        bare: bool,
        profiler: str,
        without: tuple[str, ...] = (),
    ) -> None:
        from kstest.gateway import free_port

        self.redis_url, self.swarm = redis_url, swarm
        self.token = ""
        self.mention = ""  # "@name " when the posts mention another agent (--mention)
        self.ports = (free_port(), free_port() if bare else None)
        self.control, child_end = multiprocessing.Pipe()
        self.proc = multiprocessing.get_context("spawn").Process(
            target=server_process,
            args=(str(tree), redis_url, swarm, str(home), self.ports, profiler, without, child_end),
        )

    def start(self, mention: bool = False) -> None:
        from gateway.principals import PrincipalKind
        from kstest.gateway import _create_principal

        self.proc.start()
        assert self.control.recv() == "ready"
        self.token = asyncio.run(
            _create_principal(self.redis_url, f"agent-{self.swarm}", PrincipalKind.agent, self.swarm)
        )
        if mention:  # another agent of the same swarm, named in every post (its inbox gets each)
            name = f"reviewer-{self.swarm}"
            asyncio.run(_create_principal(self.redis_url, name, PrincipalKind.agent, self.swarm))
            self.mention = f"@{name} "

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports[0]}"

    @property
    def bare_url(self) -> str:
        return f"http://127.0.0.1:{self.ports[1]}"

    def stop(self) -> None:
        self.control.send("quit")
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.terminate()


class Phase:
    def __init__(self, name: str, server: Server, one: Callable[[int], Awaitable[Any]]) -> None:
        self.name, self.server, self.one = name, server, one
        self.walls: list[float] = []
        self.server_cpu = self.client_cpu = 0.0
        self.server_parts: Counter[str] = Counter()
        self.client_parts: Counter[str] = Counter()
        self.n = 0

    async def run(self, n: int, profiler: str) -> None:
        """N sequential calls, timed, with both sides' CPU and profiles (accumulated over rounds)."""
        self.server.control.send("start")
        assert self.server.control.recv() == "started"
        client = PhaseProfiler(profiler)
        client.start()
        for i in range(n):
            t = time.perf_counter()
            await self.one(i)
            self.walls.append(time.perf_counter() - t)
        cpu, parts = client.stop()
        self.client_cpu += cpu
        self.client_parts.update(parts)
        self.server.control.send("stop")
        cpu, parts = self.server.control.recv()
        self.server_cpu += cpu
        self.server_parts.update(parts)
        self.n += n

    def p50(self) -> float:
        return sorted(self.walls)[len(self.walls) // 2]


def gateway_phases(
    label: str, server: Server, rest: AsyncGatewayClient, legacy: Any, modern: Client
) -> list[Phase]:
    """REST, MCP (2025 handshake era, as Claude Code) and MCP 2026-07-28 posts to one gateway."""
    from kstest.mcp_client import call

    async def rest_post(i: int) -> None:
        await rest.post("general", f"{server.mention}rest {i}")

    async def mcp_post(i: int) -> None:
        await call(legacy, "chat_post", channel="general", text=f"{server.mention}mcp {i}")

    async def modern_post(i: int) -> None:
        text = f"{server.mention}mcp {i}"
        result = await modern.call_tool("chat_post", {"channel": "general", "text": text})
        assert not result.is_error, result

    return [
        Phase(f"rest{label}", server, rest_post),
        Phase(f"mcp{label}", server, mcp_post),
        Phase(f"mcp-2026{label}", server, modern_post),
    ]


async def drive(servers: dict[str, Server], n: int, rounds: int, profiler: str) -> list[Phase]:
    """Every path, interleaved over ``rounds`` so that a load spike hits all of them alike."""
    current = servers["current"]
    async with httpx.AsyncClient(base_url=current.bare_url) as bare, contexts(servers) as sessions:

        async def bare_post(i: int) -> None:
            (await bare.post("/post", json={"channel": "general", "text": f"bare {i}"})).raise_for_status()

        phases = [Phase("bare", current, bare_post)]
        per_gateway = [gateway_phases(label, *clients) for label, clients in sessions.items()]
        phases += [phase for group in per_gateway for phase in group]
        for phase in phases:  # warm every path (imports, caches, connections)
            for i in range(30):
                await phase.one(i)
        for round_ in range(rounds):
            # With --baseline, the gateways take turns going first: whichever runs right after the
            # bare endpoint reads more CPU (~5-15 % in an A/A run), and alternating spreads that alike.
            order = per_gateway if round_ % 2 == 0 else per_gateway[::-1]
            for phase in [phases[0], *(p for group in order for p in group)]:
                await phase.run(n // rounds, profiler)
    return phases


class contexts:
    """REST client, legacy MCP session and 2026-07-28 MCP client per server, entered together."""

    def __init__(self, servers: dict[str, Server]) -> None:
        self.servers = servers
        self.stack: Any = None

    async def __aenter__(self) -> dict[str, tuple[Server, AsyncGatewayClient, Any, Client]]:
        from contextlib import AsyncExitStack

        from gateway.client import AsyncGatewayClient, GatewayTarget
        from gateway.client.target import auth_headers
        from kstest.mcp_client import mcp_session

        self.stack = AsyncExitStack()
        out = {}
        for name, server in self.servers.items():
            label = "" if name == "current" else f"@{name}"
            rest = await self.stack.enter_async_context(
                AsyncGatewayClient(GatewayTarget(token=server.token, url=server.url))
            )
            legacy = await self.stack.enter_async_context(mcp_session(server.url, server.token))
            http = await self.stack.enter_async_context(
                httpx2.AsyncClient(headers=auth_headers(server.token), timeout=60)
            )
            transport = streamable_http_client(f"{server.url}/mcp", http_client=http)
            modern = await self.stack.enter_async_context(Client(transport, mode="2026-07-28"))
            out[label] = (server, rest, legacy, modern)
        return out

    async def __aexit__(self, *exc: object) -> None:
        await self.stack.__aexit__(*exc)


def report(phases: list[Phase]) -> None:
    bare = phases[0]
    print("per request (sequential, loopback; CPU = time.process_time of each process / calls):")
    print(
        f"  {'path':<22} {'wall p50':>9} {'server CPU':>11} {'client CPU':>11}   wall ratio  server-CPU ratio"
    )
    for p in phases:
        server_us, client_us = p.server_cpu / p.n * 1e6, p.client_cpu / p.n * 1e6
        print(
            f"  {p.name:<22} {ms(p.p50()):>9} {server_us:>8.0f} µs {client_us:>8.0f} µs"
            f"   {p.p50() / bare.p50():>8.2f}x  {p.server_cpu / bare.server_cpu:>8.2f}x"
        )
    profiled = [p for p in phases if p.server_parts]
    if not profiled:
        return
    if "function calls" in profiled[0].server_parts:
        print("Python function calls per request (cProfile), server side by package, and the client's total:")
        keys = ["function calls", *(f"calls: {p}" for p in CALL_PACKAGES), "calls: other"]
        print(
            f"  {'path':<28}" + "".join(f"{k.removeprefix('calls: ')[:9]:>10}" for k in keys) + "    client"
        )
        for p in profiled:
            row = "".join(f"{p.server_parts[k] / p.n:>10.0f}" for k in keys)
            print(f"  {p.name:<28}{row}{p.client_parts['function calls'] / p.n:>10.0f}")
        return
    parts = sorted({k for p in profiled for k in p.server_parts}, key=lambda k: -profiled[-1].server_parts[k])
    print("server time per call by part (profiler samples, µs; idle = the loop waiting for the client):")
    print("  " + f"{'part':<52}" + "".join(f"{p.name[:12]:>13}" for p in profiled))
    for part in parts:
        print(
            "  "
            + f"{part[:52]:<52}"
            + "".join(f"{p.server_parts[part] / p.n * 1e6:>13.0f}" for p in profiled)
        )
    print("client time per call, top parts (µs):")
    client_parts = sorted(
        {k for p in profiled for k in p.client_parts}, key=lambda k: -profiled[-1].client_parts[k]
    )
    for part in client_parts[:4]:
        print(
            "  "
            + f"{part[:52]:<52}"
            + "".join(f"{p.client_parts[part] / p.n * 1e6:>13.0f}" for p in profiled)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=400, help="sequential calls per path")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds the calls are split into")
    parser.add_argument("--baseline", help="also measure the gateway of this commit, in the same run")
    parser.add_argument(
        "--without",
        help="also measure the current gateway without these plugins (comma-separated, e.g. search,monitor)",
    )
    parser.add_argument("--profiler", choices=("pyinstrument", "cprofile", "none"), default="pyinstrument")
    parser.add_argument("--mention", action="store_true", help="every post mentions another agent")
    args = parser.parse_args()
    if args.profiler == "pyinstrument" and importlib.util.find_spec("pyinstrument") is None:
        parser.error("pyinstrument is not installed: pip install pyinstrument, or --profiler none")
    from orchestrator.local.embedded_redis import EmbeddedRedis

    tmp = Path(tempfile.mkdtemp(prefix="ksmcp"))
    # A Redis per gateway: on a shared one, the background work of both (the monitor feeder's lease)
    # would run in whichever gateway holds it, and read as that gateway's cost per call.
    redises: list[EmbeddedRedis] = []

    def redis_url() -> str:
        redises.append(EmbeddedRedis(tmp / f"r{len(redises)}"))
        return redises[-1].ensure_running()

    servers = {"current": Server(ROOT, redis_url(), "bench", tmp / "home", True, args.profiler)}
    if args.baseline:
        tree = baseline_tree(args.baseline, tmp / "baseline")
        servers[args.baseline[:10]] = Server(
            tree, redis_url(), "baseline", tmp / "home-b", False, args.profiler
        )
    if args.without:
        without = tuple(args.without.split(","))
        label = "no-" + "-".join(without)
        servers[label] = Server(ROOT, redis_url(), label, tmp / "home-w", False, args.profiler, without)
    try:
        for server in servers.values():
            server.start(args.mention)
        load = os.getloadavg()
        print(
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
            f"load average {load[0]:.2f} {load[1]:.2f}, "
            f"profiler {args.profiler}, {args.n} calls per path in {args.rounds} interleaved rounds"
            + (", each post mentioning another agent" if args.mention else "")
        )
        phases = asyncio.run(drive(servers, args.n, args.rounds, args.profiler))
        report(phases)
        load = os.getloadavg()
        print(f"load average after: {load[0]:.2f} {load[1]:.2f}")
    finally:
        for server in servers.values():
            server.stop()
        for redis in redises:
            redis.release()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
