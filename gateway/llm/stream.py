"""The proxy's per-request pieces: a concurrency slot, and an upstream SSE stream passed through.

A stream is settled exactly once, however it ends (docs/llm-proxy.md, "Settling"): when its last
bytes are out (in a task of its own, which the agent's next request and every reader of its usage
wait for); a client that leaves, or an upstream that breaks, settles it in ``close``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

import anyio
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway.llm.books import Reservation, Usage
from gateway.llm.sse_scrub import SSEKeyScrubber, SSEUsage
from gateway.llm.upstream import UpstreamBroke, UpstreamResponse
from gateway.principals import Principal

if TYPE_CHECKING:
    from gateway.llm.proxy import LLMProxy

log = logging.getLogger("kswarm.llm_proxy")


class Slot:
    """One of the global concurrency slots; ``release`` is idempotent."""

    def __init__(self, proxy: LLMProxy) -> None:
        self.proxy = proxy
        self.held = False

    async def acquire(self) -> None:
        metrics = self.proxy.metrics
        metrics.queued.inc()
        try:
            await self.proxy.slots.acquire()
        finally:
            metrics.queued.dec()
        self.held = True
        metrics.in_flight.inc()

    def release(self) -> None:
        if self.held:
            self.held = False
            self.proxy.slots.release()
            self.proxy.metrics.in_flight.dec()


class ClientWatch:
    """Cancels ``task`` once the client has gone (``receive`` says ``http.disconnect``) unless
    ``stop`` came first; ``absorb`` takes back that one cancellation, if it was made."""

    def __init__(self, task: asyncio.Task[Any], receive: Receive) -> None:
        self.task = task
        self.receive = receive
        self.left = False
        self.stopped = False
        self.watcher = asyncio.get_running_loop().create_task(self._watch(), name="llm-client-watch")

    async def _watch(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass
        if not self.stopped:
            self.left = True
            self.task.cancel()

    def absorb(self) -> bool:
        """Whether the task's cancellation was only this watch's (now withdrawn)."""
        if not self.left:
            return False
        self.left = False
        return self.task.uncancel() == 0

    def stop(self) -> None:
        self.stopped = True
        self.watcher.cancel()


class ProxyStream(StreamingResponse):
    """An upstream SSE stream passed through; settled at the end, cleanup on every exit."""

    def __init__(
        self,
        proxy: LLMProxy,
        upstream: UpstreamResponse,
        slot: Slot,
        principal: Principal,
        reservation: Reservation | None,
        headers: dict[str, str],
    ) -> None:
        self.proxy = proxy
        self.upstream = upstream
        self.slot = slot
        self.principal = principal
        self.reservation = reservation
        self.parser = SSEUsage()
        self.scrubber = SSEKeyScrubber(proxy.secret)  # also catches a key spelled out across deltas
        self.finished = False  # the upstream's stream ended normally
        self.broke = False  # the upstream's stream failed
        self.closed = False
        self.chunks = self._chunks()
        super().__init__(self.chunks, status_code=upstream.status_code, headers=headers)

    async def _chunks(self) -> AsyncGenerator[bytes, None]:
        try:
            async for chunk in self.upstream.chunks():
                self.parser.feed(chunk)
                if out := self.scrubber.feed(chunk):
                    yield out
        except UpstreamBroke as exc:
            log.warning("upstream stream broke for %s: %s", self.principal.name, exc)
            self.broke = True
            error = {"type": "error", "error": {"type": "api_error", "message": "upstream stream broke"}}
            yield self.scrubber.flush() + b"event: error\ndata: " + json.dumps(error).encode() + b"\n\n"
        else:
            self.finished = True
        if tail := self.scrubber.flush():
            yield tail
        self._settle()

    def _spent(self, res: Reservation) -> Usage | None:
        """What this stream is booked (None: nothing); docs/llm-proxy.md, "Settling"."""
        parser = self.parser
        if self.upstream.status_code != 200:
            return None
        if parser.seen:
            if parser.final or (self.finished and not parser.error):
                return res.billable(parser.usage)  # an unreported output count books max_tokens
            return res.billable(parser.usage, output_floor=parser.deltas)  # cut: what it delivered
        if self.broke or parser.error:
            return None  # failed upstream before reporting anything
        if self.finished:
            return res.billable(None)  # a 200 stream that never reports usage: its worst case
        return res.billable(None, output_floor=0)  # the client left before the first event: the input

    def _settle(self) -> None:
        res, self.reservation = self.reservation, None  # settled once, whoever gets here first
        if res is not None:
            self.proxy.settle_soon(res, self.parser.model, self._spent(res))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Streams in the request's own task while a watcher task waits for the client to leave, and
        then cancels it: the upstream is dropped and what was delivered is settled (``close``).

        The server speaks ASGI 2.3, where ``send`` to a client that left returns quietly, so something
        must listen. Starlette's ``StreamingResponse`` streams in a task of a new anyio task group
        while the request's task listens; this is the same effect without the task group, and the
        first byte does not wait for a new task to be scheduled (docs/performance.md, "The LLM
        proxy's stream")."""
        task = asyncio.current_task()
        assert task is not None
        watch = ClientWatch(task, receive)
        try:
            await self.stream_response(send)
        except asyncio.CancelledError:
            if not watch.absorb():  # a cancellation of the request itself (shutdown): goes on
                raise
        else:
            watch.absorb()  # the client left as the stream ended: its cancellation is dropped
        finally:
            watch.stop()
            with anyio.CancelScope(shield=True):
                await self.close()

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            await self.chunks.aclose()
            self.upstream.close()
            self._settle()  # a client that went away still spent what it spent
        finally:
            self.slot.release()
