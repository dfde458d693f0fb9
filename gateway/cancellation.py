"""Loops that end when their task is cancelled, also when a library lost the ``CancelledError``.

redis-py (8.2) can return from a blocking read (``XREAD BLOCK``, a pub/sub read) as if nothing had
happened when its task is cancelled during the read: the ``CancelledError`` is gone while the task's
cancellation stays requested (``Task.cancelling()``). Measured: 5 of 300 cancelled ``XREAD BLOCK``
calls. A loop that relied on the exception alone went round again and never ended, and a stopping
gateway waited on it for good. Every long-running loop of the gateway therefore goes round through
``rounds()``, which raises ``CancelledError`` once its task's cancellation was requested, and pauses
with ``nap()``, which does too; a task that is stopped is waited for a bounded time (``stop_task``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("kswarm.gateway")

STOP_WAIT_S = 5.0  # how long a stopping gateway waits for one cancelled loop


def cancel_requested() -> bool:
    """Whether the running task was asked to stop, whether or not the exception reached it."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def rounds() -> Iterator[None]:
    """``for _ in rounds():`` is ``while True:`` that ends with ``CancelledError`` at the top of the
    first round after the task's cancellation was requested (see the module's docstring)."""
    while True:
        if cancel_requested():
            raise asyncio.CancelledError
        yield


async def nap(seconds: float) -> None:
    """A loop's pause between rounds: ``asyncio.sleep``, unless the task's cancellation was already
    requested (and swallowed in this round's body): then ``CancelledError`` at once, not a full pause
    first."""
    if cancel_requested():
        raise asyncio.CancelledError
    await asyncio.sleep(seconds)


async def stop_task(task: asyncio.Task[Any], what: str) -> bool:
    """Cancel ``task`` and wait up to ``STOP_WAIT_S`` for it to end; one that does not is named in the
    log and left behind (the caller stops all the same). True when it ended."""
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=STOP_WAIT_S)
    if not done:
        log.error("%s ignored its cancellation for %ss; stopping without it", what, STOP_WAIT_S)
        return False
    if not task.cancelled() and task.exception() is not None:
        log.error("%s had failed: %r", what, task.exception())
    return True
