"""Usage is booked after the answer, off its path, and the books stay read-your-writes: a reader of an
agent's usage, and the agent's next request, wait for the booking still in flight."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import pytest
from test_llm_proxy import MSG, REAL_KEY, ProxyGateway

from gateway.context import GatewayContext
from gateway.llm import usage as usage_module
from gateway.llm.config import LLMProxySettings
from gateway.llm.plugin import LLMProxyPlugin
from gateway.llm.proxy import LLMProxy
from gateway.plugin import Contribution
from gateway.services import LLM_PROXY
from kstest.upstream import ScriptedUpstream, text_reply

EVENT_S = 30  # a failure detector for events that must come, not a timing
MODEL = "claude-sonnet-4-test"


class GatedBooks:
    """Holds every settlement until ``release``; says when someone waits for the books."""

    def __init__(self, proxy: LLMProxy) -> None:
        self.usage = proxy.usage
        self.release = threading.Event()
        self.booking = threading.Event()  # a settlement is in flight (and held)
        self.waited: list[str | None] = []  # whose books were waited for while one was in flight
        self.someone_waits = threading.Event()
        real_settle, real_settled = self.usage.settle, self.usage.settled

        async def settle(*args: Any, **kwargs: Any) -> Any:
            self.booking.set()
            await asyncio.get_running_loop().run_in_executor(None, self.release.wait)
            return await real_settle(*args, **kwargs)

        async def settled(name: str | None = None) -> bool:
            if self.booking.is_set() and not self.release.is_set():
                self.waited.append(name)
                self.someone_waits.set()
            return await real_settled(name)

        self.usage.settle = settle  # type: ignore[method-assign]
        self.usage.settled = settled  # type: ignore[method-assign]


@contextmanager
def gated(redis_url: str, home: Path) -> Iterator[tuple[ProxyGateway, GatedBooks, ScriptedUpstream]]:
    """A gateway whose LLM proxy holds every settlement until the gate's ``release``."""
    gates: list[GatedBooks] = []

    class Gated(LLMProxyPlugin):
        def contribute(self, ctx: GatewayContext) -> Contribution:
            contribution = super().contribute(ctx)
            gates.append(GatedBooks(contribution.services[LLM_PROXY]))
            return contribution

    with ScriptedUpstream(api_key=REAL_KEY) as upstream:
        settings = LLMProxySettings(upstream_url=upstream.url, api_key=REAL_KEY)
        gw = ProxyGateway(redis_url, home, settings, plugins=[Gated(settings)])
        try:
            (gate,) = gates
            yield gw, gate, upstream
        finally:
            for held in gates:
                held.release.set()
            gw.stop()


def answered_before_its_booking(pool: ThreadPoolExecutor, sdk: anthropic.Anthropic, gate: GatedBooks) -> None:
    """One call whose answer arrives while its booking is held: the answer did not wait for it."""
    answered = pool.submit(sdk.messages.create, model=MODEL, max_tokens=50, messages=MSG)
    assert answered.result(EVENT_S).content[0].text == "hi"
    assert gate.booking.wait(EVENT_S) and not gate.release.is_set()


def test_the_answer_goes_before_its_booking_and_readers_wait_for_it(
    clean_redis: str, short_tmp: Path
) -> None:
    with gated(clean_redis, short_tmp / "gw") as (gw, gate, upstream), ThreadPoolExecutor(2) as pool:
        token = gw.add("alice")
        upstream.script(text_reply("hi", usage={"input_tokens": 1000, "output_tokens": 200}))
        answered_before_its_booking(pool, gw.sdk(token), gate)

        # A reader of alice's usage waits for the booking in flight, then sees it.
        def read() -> dict[str, Any]:
            with gw.api(token) as client:
                return client.get("/api/usage/alice").json()

        reading = pool.submit(read)
        assert gate.someone_waits.wait(EVENT_S), "the usage read did not wait for the booking"
        assert gate.waited == ["alice"]
        gate.release.set()
        alice = reading.result(EVENT_S)
        assert (alice["input_tokens"], alice["output_tokens"], alice["requests"]) == (1000, 200, 1)
        assert alice["reserved_tokens"] == 0


def test_the_next_request_is_judged_on_the_last_answers_booking(clean_redis: str, short_tmp: Path) -> None:
    with gated(clean_redis, short_tmp / "gw") as (gw, gate, upstream), ThreadPoolExecutor(2) as pool:
        sdk = gw.sdk(gw.add("bob"))
        reply = text_reply("hi", usage={"input_tokens": 10, "output_tokens": 5})
        upstream.script(reply, reply)
        answered_before_its_booking(pool, sdk, gate)
        second = pool.submit(sdk.messages.create, model=MODEL, max_tokens=50, messages=MSG)
        assert gate.someone_waits.wait(EVENT_S), "the next request did not wait for the booking"
        assert gate.waited == ["bob"]
        assert len(upstream.requests()) == 1  # held before its reservation, so before the upstream
        gate.release.set()
        assert second.result(EVENT_S).content[0].text == "hi"


def test_an_operator_clears_a_hold_only_after_the_answer_that_set_it_is_booked(
    clean_redis: str, short_tmp: Path
) -> None:
    """An answer that books more than it reserved sets a hold when it is booked: an operator's budget
    update (which clears the hold) that came in between must not be undone by that booking."""
    with gated(clean_redis, short_tmp / "gw") as (gw, gate, upstream), ThreadPoolExecutor(2) as pool:
        sdk = gw.sdk(gw.add("carol"))
        upstream.script(text_reply("hi", usage={"input_tokens": 1000, "output_tokens": 200}))  # > reserved
        answered_before_its_booking(pool, sdk, gate)

        def clear() -> dict[str, Any]:
            with gw.api() as client:
                return client.put("/api/usage/carol/budget", json={}).json()

        clearing = pool.submit(clear)
        assert gate.someone_waits.wait(EVENT_S), "the budget update did not wait for the booking"
        gate.release.set()
        assert clearing.result(EVENT_S)["hold"] is None
        with gw.api() as client:
            assert client.get("/api/usage/carol").json()["hold"] is None  # not set again behind it


def test_a_request_whose_books_stay_busy_is_refused_retryably(
    clean_redis: str, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request is never judged without its agent's last answer booked: when the booking takes longer
    than the gateway waits, the request gets a 503 (which clients retry), not a decision on stale books."""
    monkeypatch.setattr(usage_module, "DRAIN_S", 0.2)
    with gated(clean_redis, short_tmp / "gw") as (gw, gate, upstream), ThreadPoolExecutor(1) as pool:
        sdk = gw.sdk(gw.add("dave"), max_retries=0)
        reply = text_reply("hi", usage={"input_tokens": 10, "output_tokens": 5})
        upstream.script(reply, reply)
        answered_before_its_booking(pool, sdk, gate)
        with pytest.raises(anthropic.APIStatusError) as refused:
            sdk.messages.create(model=MODEL, max_tokens=50, messages=MSG)
        assert refused.value.status_code == 503
        assert "still booking dave's last model call" in str(refused.value)
        assert len(upstream.requests()) == 1
