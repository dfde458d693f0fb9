"""``gateway.server.serve``: what a process that is the gateway does once it has started."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kstest.gateway import free_port

SERVE_ONCE = """
import asyncio, gc, sys
from gateway.app import create_app
from gateway.config import GatewaySettings
from gateway.plugins import default_plugins
from gateway.server import serve

async def main() -> None:
    settings = GatewaySettings(redis_url=sys.argv[1], home=sys.argv[2], port=int(sys.argv[3]))
    ready, stop = asyncio.Event(), asyncio.Event()
    server = asyncio.create_task(serve(create_app(settings, plugins=default_plugins()), settings, ready, stop,
                                       freeze_heap=sys.argv[4] == "1"))
    await ready.wait()
    print("frozen", gc.get_freeze_count(), flush=True)
    stop.set()
    await server

asyncio.run(main())
"""


@pytest.mark.parametrize("freeze", [True, False])
def test_a_gateway_process_keeps_its_start_up_heap_out_of_gc_passes(
    clean_redis: str, short_tmp: Path, freeze: bool
) -> None:
    """The p99 of post→inbox was a full GC pass over the start-up heap (docs/performance.md, "Scale"):
    ``python -m gateway`` and ``kswarm up`` freeze it once started; a gateway in a shared process
    (the tests' threads) does not, since frozen objects' cycles are never collected."""
    args = [clean_redis, str(short_tmp / "home"), str(free_port()), "1" if freeze else "0"]
    done = subprocess.run(
        [sys.executable, "-c", SERVE_ONCE, *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    frozen = int(done.stdout.split("frozen ")[1].split()[0])
    assert (frozen > 10_000) if freeze else (frozen == 0), done.stdout
