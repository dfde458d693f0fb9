"""A loop whose library swallowed its cancellation still ends (gateway/cancellation.py), and the parts
built on such loops stop: the event hub, a plugin's background loop, a plugin's tear-down.

redis-py 8.2 at times returns from a cancelled ``XREAD BLOCK`` as if nothing had happened (the task's
cancellation stays requested); a ``Swallower``'s reads do that every time until it is cured (the test's
clean-up, so that a failing test ends instead of hanging)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway.cancellation import STOP_WAIT_S, cancel_requested, nap, rounds
from gateway.events import EventHub
from gateway.metrics import GatewayMetrics
from gateway.plugin import background, bounded_stop
from gateway.redis_facade import str_redis

ENDS_WITHIN_S = STOP_WAIT_S + 20  # a loop that never ends fails here instead of hanging the suite


class Swallower:
    """Blocking reads that return an empty reply when their task is cancelled, as redis-py can."""

    def __init__(self) -> None:
        self.cured = False
        self.reading = asyncio.Event()  # a read began

    async def read(self, *_: Any, **__: Any) -> list[Any]:
        self.reading.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            if self.cured:
                raise
        return []

    def cure(self) -> None:
        """From now on a cancelled read raises; every other task is cancelled once more."""
        self.cured = True
        for task in asyncio.all_tasks() - {asyncio.current_task()}:
            task.cancel()


async def ends(stopping: Any, swallower: Swallower) -> bool:
    """Whether ``stopping`` (a coroutine that stops something) ends; cleans up either way."""
    task = asyncio.ensure_future(stopping)
    done, _ = await asyncio.wait({task}, timeout=ENDS_WITHIN_S)
    swallower.cure()
    await asyncio.wait({task}, timeout=ENDS_WITHIN_S)
    return task in done


async def cancelled_in_its_read_ends(loop: Coroutine[Any, Any, None], swallower: Swallower) -> bool:
    """Whether ``loop``, cancelled once it is in its first read, ends."""
    task = asyncio.create_task(loop)

    async def stop() -> None:
        await swallower.reading.wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return await ends(stop(), swallower)


def test_a_loop_ends_at_its_next_round_when_the_cancellation_was_swallowed() -> None:
    swallower = Swallower()

    async def reading_forever() -> None:
        for _ in rounds():
            await swallower.read()

    assert asyncio.run(cancelled_in_its_read_ends(reading_forever(), swallower))


def test_cancel_requested_is_false_in_a_task_nobody_cancelled() -> None:
    async def main() -> bool:
        return cancel_requested()

    assert asyncio.run(main()) is False


def test_the_event_hub_stops_when_redis_swallows_the_cancellation_of_its_read(clean_redis: str) -> None:
    swallower = Swallower()

    async def main() -> bool:
        redis = str_redis(Redis.from_url(clean_redis, decode_responses=True))
        hub = EventHub(redis, GatewayMetrics())
        own_reader = hub._reader_client

        def reader() -> Any:
            client = own_reader()
            client.xread = swallower.read  # type: ignore[method-assign]
            return client

        hub._reader_client = reader  # type: ignore[method-assign]

        async def run_and_stop() -> None:
            async with hub.running():
                await swallower.reading.wait()

        try:
            return await ends(run_and_stop(), swallower) and not hub.live
        finally:
            await redis.aclose()

    assert asyncio.run(main()), "the event hub's stop waited on its reader for good"


def test_a_background_loop_that_swallows_its_cancellation_does_not_hold_the_stop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    swallower = Swallower()

    async def deaf() -> None:  # no rounds(): a plugin's loop written without them
        while True:
            await swallower.read()

    async def reading() -> None:
        for _ in rounds():
            await swallower.read()

    async def run_and_stop() -> None:
        async with background({"kswarm-deaf": deaf(), "kswarm-reading": reading()}):
            await asyncio.sleep(0)

    assert asyncio.run(ends(run_and_stop(), swallower))
    assert "background loop kswarm-deaf ignored its cancellation" in caplog.text
    assert "kswarm-reading" not in caplog.text


def test_a_tear_down_that_swallows_its_cancellation_does_not_hold_the_stop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    swallower = Swallower()

    @asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        yield
        while True:  # a close that never ends, deaf to its cancellation
            await swallower.read()

    async def run_and_stop() -> None:
        async with bounded_stop("stuck", lifespan()):
            pass

    assert asyncio.run(ends(run_and_stop(), swallower))
    assert "plugin stuck took over" in caplog.text


def test_a_pause_after_a_swallowed_cancellation_ends_at_once() -> None:
    swallower = Swallower()

    async def reading_then_pausing() -> None:
        for _ in rounds():
            await swallower.read()
            await nap(3600)  # a loop's pause: not slept out once the cancellation was requested

    assert asyncio.run(cancelled_in_its_read_ends(reading_then_pausing(), swallower))


def test_a_tear_down_that_ends_cancelled_by_itself_does_not_break_the_stop() -> None:
    @asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        yield
        helper = asyncio.create_task(asyncio.Event().wait())
        helper.cancel()
        await helper  # its CancelledError ends the tear-down

    async def main() -> None:
        async with bounded_stop("cancelled", lifespan()):
            pass

    asyncio.run(main())  # raises CancelledError if the stop let the tear-down's cancellation out
