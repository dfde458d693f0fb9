"""Heartbeats while the agent waits and while it works: a timer task, not part of the model loop.

``Pulse`` posts ``POST /api/heartbeat {state, doing}`` every ``interval`` seconds and at once when
the state changes, through any ``HeartbeatSink`` (``AsyncGatewayClient`` is one). Failures are
logged and retried on the next tick: a dead gateway must not stop the agent.

Heartbeats are not logged one by one (they were two thirds of an agent's log): ``sent`` and ``failed``
count them, one line every ``log_every`` seconds says how many went out, the first failure of a run of
failures is a warning and the recovery after it one more line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Protocol

from gateway.client import visible

log = logging.getLogger("kswarm.agent.pulse")


class HeartbeatSink(Protocol):
    async def heartbeat(self, state: str = "idle", doing: str = "") -> None: ...


class Pulse:
    """The agent's current state, reported on a timer and on every change."""

    def __init__(self, sink: HeartbeatSink, interval: float, log_every: float = 300.0) -> None:
        self.sink = sink
        self.interval = interval
        self.log_every = log_every
        self.state = "starting"
        self.doing = ""
        self.changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.sent = 0
        self.failed = 0
        self.failing = 0  # consecutive failures now
        self._logged_sent = 0
        self._logged_at = time.monotonic()

    def set(self, state: str, doing: str = "") -> None:
        doing = visible(doing, bidi=False)  # the gateway refuses control characters in text
        doing = doing if len(doing) <= 200 else doing[:197] + "..."
        if (state, doing) != (self.state, self.doing):
            self.state, self.doing = state, doing
            self.changed.set()

    async def __aenter__(self) -> Pulse:
        self.task = asyncio.create_task(self._run(), name="heartbeat")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None

    async def beat(self) -> None:
        """One heartbeat, counted; a failure is logged once per run of failures."""
        try:
            await self.sink.heartbeat(self.state, self.doing)
        except Exception as exc:  # reported, then retried on the next tick
            self.failed += 1
            self.failing += 1
            if self.failing == 1:
                log.warning("heartbeat failed (retrying every %.0f s, logged once): %s", self.interval, exc)
            return
        self.sent += 1
        if self.failing:
            log.info("heartbeat: back after %d failed attempt(s)", self.failing)
            self.failing = 0
        now = time.monotonic()
        if now - self._logged_at >= self.log_every:
            log.info(
                "heartbeat: %d sent in the last %.0f s (%d in all, %d failed); state %s",
                self.sent - self._logged_sent,
                now - self._logged_at,
                self.sent,
                self.failed,
                self.state,
            )
            self._logged_sent, self._logged_at = self.sent, now

    async def _run(self) -> None:
        while True:
            self.changed.clear()
            await self.beat()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), self.interval)
