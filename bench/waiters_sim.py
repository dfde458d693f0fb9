"""Simulation of many agents' wait/post pattern against the gateway's waiter registry (no processes).

Run: ``.venv/bin/python bench/waiters_sim.py [--agents 1000] [--posts 20000]``.

``--agents`` asyncio tasks each loop as a blocked inbox wait does (``gateway.events.Watch``: arm, wait,
re-arm); the "reader" feeds the hub wake-up entries the way ``EventHub._take`` receives them from
``XREAD``, each naming one random agent's inbox. Printed: memory per armed waiter (tracemalloc, the
watch, its topic entry and the waiting task), the hub's cost per wake-up entry (the reader's side),
and the time from a wake-up to its waiter running again (the event loop's side) -- no Redis involved,
so this is the registry's own cost, the floor under bench/scale.py's figures.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
import tracemalloc

from _common import pct

from gateway import keys
from gateway.events import EventHub
from gateway.metrics import GatewayMetrics


async def simulate(n_agents: int, n_posts: int, batch: int) -> None:
    hub = EventHub(redis=None, metrics=GatewayMetrics())  # type: ignore[arg-type]  # no reads here
    hub.active = hub.live = True
    woken_at: dict[str, float] = {}
    wake_latency: list[float] = []
    stop = asyncio.Event()
    names = [f"agent{i}" for i in range(n_agents)]

    async def agent(name: str) -> None:
        with hub.watch(keys.inbox_topic(name)) as watch:
            while not stop.is_set():
                if await watch.wait(1.0):
                    sent = woken_at.pop(name, None)
                    if sent is not None:
                        wake_latency.append(time.perf_counter() - sent)
                watch.arm()

    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    tasks = [asyncio.create_task(agent(n)) for n in names]
    await asyncio.sleep(0.1)  # every agent armed and waiting
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert hub.waiters() == n_agents

    take_cost: list[float] = []
    sequence = 0
    for _ in range(n_posts // batch):
        entries = []
        for _ in range(batch):
            sequence += 1
            name = random.choice(names)
            woken_at.setdefault(name, time.perf_counter())
            entries.append((f"{sequence}-0", {"to": keys.inbox_topic(name)}))
        t = time.perf_counter()
        hub._take([(keys.WAKE, entries)])
        take_cost.append((time.perf_counter() - t) / batch)
        await asyncio.sleep(0)  # the woken waiters run
        await asyncio.sleep(0)
    stop.set()
    await asyncio.gather(*tasks)
    print(f"{n_agents} waiting agents, {n_posts} wake-ups in batches of {batch}")
    print(f"  memory per armed waiter (task + watch + topic entry): {grown / n_agents:.0f} bytes")
    print(
        f"  hub cost per wake-up entry: mean {statistics.mean(take_cost) * 1e6:.1f} µs, "
        f"p99 {pct(take_cost, 99) * 1e6:.1f} µs"
    )
    print(
        f"  wake-up -> waiter running: p50 {pct(wake_latency, 50) * 1e6:.0f} µs, "
        f"p99 {pct(wake_latency, 99) * 1e6:.0f} µs ({len(wake_latency)} wakes)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--posts", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=10, help="wake-up entries per XREAD reply")
    args = parser.parse_args()
    asyncio.run(simulate(args.agents, args.posts, args.batch))


if __name__ == "__main__":
    sys.exit(main())
