"""The feeder on its own: a busy swarm's messages are indexed in batches, one write per batch."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from gateway import keys
from gateway.principals import PrincipalStore
from gateway.redis_facade import StrRedis, str_redis
from gateway.search.feeder import SearchFeeder
from gateway.search.index import Row, SearchIndex


class HeldFeeder(SearchFeeder):
    """A feeder whose pause between writes lasts until the test lets it go on."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.paused = asyncio.Event()
        self.go_on = asyncio.Event()

    async def gather(self) -> None:
        self.paused.set()
        await self.go_on.wait()
        self.go_on.clear()


async def post(redis: StrRedis, n: int) -> None:
    await redis.xadd(
        keys.EVENTS,
        {
            "type": "message",
            "id": f"{n}-0",
            "channel": "general",
            "sender": "alice",
            "text": f"note {n}",
            "ts": str(time.time()),
        },
    )


async def test_messages_that_arrive_during_the_pause_are_indexed_in_one_write(
    clean_redis: str, tmp_path: Path
) -> None:
    redis = str_redis(Redis.from_url(clean_redis, decode_responses=True))
    index = SearchIndex(tmp_path / "messages.sqlite3")
    feeder = HeldFeeder(redis, PrincipalStore(redis, "test"), index)
    writes: list[int] = []
    started = asyncio.Event()
    own_add = index.add

    async def add(rows: list[Row], cursor: str | None = None) -> int:
        writes.append(len(rows))
        started.set()
        return await own_add(rows, cursor)

    index.add = add  # type: ignore[method-assign]
    await post(redis, 0)  # before the start: the feeder's starting point
    task = asyncio.create_task(feeder.run())
    try:
        await started.wait()  # its first start marks where it tails from
        await post(redis, 1)
        await feeder.paused.wait()  # message 1 written; the feeder pauses
        for n in range(2, 22):
            await post(redis, n)
        feeder.paused.clear()
        feeder.go_on.set()
        await feeder.paused.wait()  # the twenty written; the feeder pauses again
        assert writes == [0, 1, 20], "one write for the first message, one for the twenty after it"
        assert await index.count() == 21
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await index.close()
        await redis.aclose()
