"""Waiting for an event, the one way every suite does it: poll a predicate until it gives something
truthy, never sleep for a time. A predicate that raises is read as "not yet" (a record half-written, a
process starting, a feeder catching up); the last value or exception is in the failure's message."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 30.0, what: str = "condition") -> T:
    """``predicate()``'s first truthy value; AssertionError naming ``what`` after ``timeout`` seconds.
    The bound is only how long a broken run takes to fail: a passing test returns as soon as the event
    happened, however loaded the machine."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except Exception as exc:  # transient: "not yet"
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


async def until(condition: Callable[[], object], what: str, bound: float = 30.0) -> None:
    """``wait_for`` for a test on the event loop: yields to it between looks (the gateway under test
    may run on the same loop), so the condition can come true."""
    deadline = time.monotonic() + bound
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.02)
