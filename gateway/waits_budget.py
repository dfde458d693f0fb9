"""How many waits one agent holds open in a gateway process: inbox long polls (REST and MCP) and event
streams (SSE) together.

A wait holds no Redis connection (the event hub wakes it), but it holds a request, a coroutine and a
place in every wake-up's fan-out; without a bound, one agent opening thousands of them slows every
other agent's delivery. Past ``max_waits_per_agent`` (a gateway setting) a further one is a 429 with
``Retry-After``, naming the limit. Operators (the UI's tabs) and workers (a pool's workers share one
principal) are not counted. The count is per gateway process, as the waits are.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import aclosing, contextmanager
from typing import TypeVar

from gateway.errors import TooManyWaits
from gateway.principals import Principal, PrincipalKind

T = TypeVar("T")


class WaitBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[str, int] = {}

    def open(self, name: str) -> int:
        return self._open.get(name, 0)

    def full(self, principal: Principal) -> bool:
        """``principal`` (an agent) holds all the waits it may."""
        return principal.kind == PrincipalKind.agent and self.open(principal.name) >= self.limit

    def check(self, principal: Principal) -> None:
        """Refuse (429) when ``principal`` holds all its waits already: before a stream's answer starts."""
        if self.full(principal):
            raise TooManyWaits(
                f"{principal.name} holds {self.limit} open waits (inbox waits and event streams), the "
                f"limit per agent (max_waits_per_agent); end one first",
                headers={"Retry-After": "1"},
            )

    def acquire(self, principal: Principal) -> bool:
        """Count one more wait of ``principal``; False (nothing counted) when it holds all it may."""
        if self.full(principal):
            return False
        if principal.kind == PrincipalKind.agent:
            self._open[principal.name] = self.open(principal.name) + 1
        return True

    def release(self, principal: Principal) -> None:
        if principal.kind != PrincipalKind.agent:
            return
        left = self.open(principal.name) - 1
        if left > 0:
            self._open[principal.name] = left
        else:
            self._open.pop(principal.name, None)

    @contextmanager
    def hold(self, principal: Principal) -> Iterator[None]:
        """One wait of ``principal`` for the block's duration; a 429 (``check``) when over the limit."""
        self.check(principal)
        self.acquire(principal)
        try:
            yield
        finally:
            self.release(principal)

    async def guarded(self, principal: Principal, events: AsyncGenerator[T]) -> AsyncIterator[T]:
        """An event stream of ``principal`` counted as one of its waits while it runs. The route calls
        ``check`` first (a 429 before the answer starts); a stream opened alongside others past that
        check ends at once."""
        if not self.acquire(principal):
            return
        try:
            async with aclosing(events) as stream:
                async for event in stream:
                    yield event
        finally:
            self.release(principal)
