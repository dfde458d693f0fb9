"""Heartbeats while the agent waits and while it works: a timer task, not part of the model loop.

``Pulse`` posts ``POST /api/heartbeat {state, doing}`` every ``interval`` seconds and at once when
the state changes, through any ``HeartbeatSink`` (``AsyncGatewayClient`` is one). Failures are
logged and retried on the next tick: a dead gateway must not stop the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

log = logging.getLogger("kswarm.agent.pulse")


class HeartbeatSink(Protocol):
    async def heartbeat(self, state: str = "idle", doing: str = "") -> None: ...


class Pulse:
    """The agent's current state, reported on a timer and on every change."""

    def __init__(self, sink: HeartbeatSink, interval: float) -> None:
        self.sink = sink
        self.interval = interval
        self.state = "starting"
        self.doing = ""
        self.changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def set(self, state: str, doing: str = "") -> None:
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

    async def _run(self) -> None:
        while True:
            self.changed.clear()
            try:
                await self.sink.heartbeat(self.state, self.doing)
            except Exception as exc:  # reported, then retried on the next tick
                log.warning("heartbeat failed: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), self.interval)
