"""Attacks on the LLM proxy's books, as an agent would make them with its own token (issue 23).

- ``/v1/messages/count_tokens`` went around the books: an agent with $0 left made 40 parallel calls,
  none budget-checked, none waiting for a concurrency slot. Every upstream route now passes the agent's
  budget state and takes a slot.
- Settlement books what the upstream reports, and the reservation is bounded by ``max_tokens`` and the
  input estimate: an answer that books more than was reserved is flagged (log, ``#ops``, Attention) and
  the agent's model calls stop until an operator clears it.
- Query strings went upstream unchanged: the Messages API defines no query parameter, so only
  ``beta=true`` (what Claude Code sends on its beta calls) is forwarded; anything else is a 400.

Real gateway (uvicorn), real Redis, the scripted upstream (the only fake), real HTTP and the real SDK.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from test_llm_budget_release import wait_for
from test_llm_proxy import MSG, REAL_KEY, ProxyGateway, ProxyGateways

from gateway.llm.config import LLMProxySettings
from gateway.llm.plugin import LLMProxyPlugin
from gateway.plugins import default_plugins, replace_plugins
from kstest.upstream import ScriptedUpstream, text_reply

COUNT = "/v1/messages/count_tokens"
BODY = {"model": "m", "max_tokens": 5, "messages": MSG}


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream(api_key=REAL_KEY) as up:
        try:
            yield up
        finally:
            up.release()  # a test that failed while holding must not leave requests hanging


@pytest.fixture
def gateways(clean_redis: str, short_tmp: Path, upstream: ScriptedUpstream) -> Iterator[Any]:
    """``make(full=False, **llm_settings)``: a gateway with the proxy alone, or with every default
    plugin (the monitor's Attention included) and the proxy configured so."""
    with ProxyGateways(clean_redis, short_tmp) as gateways:

        def make(full: bool = False, **overrides: Any) -> ProxyGateway:
            llm = LLMProxySettings(**({"upstream_url": upstream.url, "api_key": REAL_KEY} | overrides))
            plugins = replace_plugins(default_plugins(), LLMProxyPlugin(llm)) if full else None
            return gateways.start(llm, plugins)

        yield make


def gauge(gw: ProxyGateway, name: str) -> float:
    with gw.api() as op:
        found = re.search(rf"^{name} (\S+)$", op.get("/metrics").text, re.M)
    return float(found.group(1)) if found else 0.0


async def parallel(
    url: str, token: str, path: str, n: int, body: dict[str, Any] = BODY
) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=60, trust_env=False) as client:
        calls = [client.post(path, json=body, headers={"x-api-key": token}) for _ in range(n)]
        return list(await asyncio.gather(*calls))


def assert_budget_refusal(reply: httpx.Response, budget: str) -> str:
    assert reply.status_code == 429, reply.text
    assert reply.headers["x-should-retry"] == "false" and reply.headers["x-kswarm-budget"] == budget
    error = reply.json()["error"]
    assert error["type"] == "rate_limit_error" and "budget exhausted" in error["message"]
    return str(error["message"])


# -- count_tokens goes through the books ---------------------------------------------------------


def test_attack_count_tokens_with_no_budget_left_is_refused(gateways, upstream) -> None:
    gw = gateways(budgets={"agent": {"usd": 0.0}})  # $0 left
    token = gw.add("mallory")
    with pytest.raises(anthropic.RateLimitError):
        gw.sdk(token, max_retries=0).messages.create(**BODY)
    answers = asyncio.run(parallel(gw.url, token, COUNT, 40))
    for reply in answers:
        assert "has used" in assert_budget_refusal(reply, "agent.usd")
    with pytest.raises(anthropic.RateLimitError):  # the SDK's own call, not retried
        gw.sdk(token).messages.count_tokens(model="m", messages=MSG)
    assert upstream.requests(COUNT) == [], "a refused count_tokens reached the upstream"
    with gw.api() as op:
        assert op.get("/api/usage/mallory").json()["reserved_tokens"] == 0  # a count reserves nothing


def test_attack_count_tokens_wait_for_a_concurrency_slot(gateways, upstream) -> None:
    gw = gateways(max_concurrency=2)
    token = gw.add("mallory")
    upstream.hold()

    async def flood() -> tuple[int, list[httpx.Response]]:
        calls = asyncio.create_task(parallel(gw.url, token, COUNT, 6))

        def arrived() -> bool:  # every call is either at the upstream or queued at the gateway
            return upstream.stats()["in_flight"] + gauge(gw, "kswarm_llm_queued_requests") == 6

        await asyncio.to_thread(wait_for, arrived, "six count_tokens calls to arrive")
        at_upstream = upstream.stats()["in_flight"]
        upstream.release()
        return at_upstream, await calls

    at_upstream, answers = asyncio.run(flood())
    assert at_upstream == 2, f"{at_upstream} count_tokens calls held upstream at once with 2 slots"
    assert [a.status_code for a in answers] == [200] * 6
    assert upstream.stats()["max_in_flight"] == 2


# -- an answer that books more than it reserved -----------------------------------------------------


def test_attack_an_answer_booking_more_than_its_reservation_stops_the_agent(gateways, upstream) -> None:
    gw = gateways(full=True)
    token, other = gw.add("mallory"), gw.add("honest")
    # max_tokens 5 and a tiny body reserve about 30 tokens; the upstream reports 5000 out.
    upstream.script(text_reply("a long answer", usage={"input_tokens": 10, "output_tokens": 5000}))
    reply = gw.sdk(token, max_retries=0).messages.create(**BODY)
    assert reply.usage.output_tokens == 5000
    with gw.api() as op:
        booked = op.get("/api/usage/mallory").json()
    assert booked["output_tokens"] == 5000, "the upstream's figure is booked"
    assert booked["hold"] and "5010 tokens" in booked["hold"] and booked["reserved_tokens"] == 0

    # Every further model call of this agent is refused, streamed or not, count_tokens too.
    upstream.script(default=text_reply("ok", usage={"input_tokens": 3, "output_tokens": 2}))
    with httpx.Client(base_url=gw.url, headers={"x-api-key": token}, timeout=30, trust_env=False) as c:
        for path, body in (("/v1/messages", BODY), ("/v1/messages", BODY | {"stream": True}), (COUNT, BODY)):
            message = assert_budget_refusal(c.post(path, json=body), "agent.hold")
            assert "mallory" in message and "PUT /api/usage/mallory/budget" in message
    assert len(upstream.requests(path=None)) == 1
    gw.sdk(other, max_retries=0).messages.create(**BODY)  # others are unaffected

    # The operator sees it: one #ops notice, and an Attention item naming how to clear it.
    notices = [n["text"] for n in gw.ops_notices()]
    assert len(notices) == 1 and "mallory" in notices[0] and "reserved" in notices[0]
    with gw.api() as op:
        items = [i for i in op.get("/api/attention").json()["items"] if i["subject"] == "mallory"]
        assert [(i["key"], i["severity"]) for i in items] == [("llm-hold:mallory", "critical")]
        assert "POST /api/usage/mallory/reset" in items[0]["reason"]
        # Cleared by the operator's budget override (or a reset): the agent runs again.
        cleared = op.put("/api/usage/mallory/budget", json={}).json()
        assert cleared["hold"] is None and cleared["output_tokens"] == 5000
        assert not [i for i in op.get("/api/attention").json()["items"] if i["subject"] == "mallory"]
    assert gw.sdk(token, max_retries=0).messages.create(**BODY).content[0].text == "ok"


def test_a_streamed_answer_booking_more_than_its_reservation_stops_the_agent(gateways, upstream) -> None:
    gw = gateways()
    token = gw.add("mallory")
    upstream.script(text_reply("streamed", usage={"input_tokens": 10, "output_tokens": 900}))
    with gw.sdk(token, max_retries=0).messages.stream(**BODY) as stream:
        assert stream.get_final_message().usage.output_tokens == 900
    with pytest.raises(anthropic.RateLimitError) as refused:
        gw.sdk(token, max_retries=0).messages.create(**BODY)
    assert refused.value.response.headers["x-kswarm-budget"] == "agent.hold"
    with gw.api() as op:
        assert op.post("/api/usage/mallory/reset").status_code == 200  # a reset clears it too
        assert op.get("/api/usage/mallory").json()["hold"] is None


# -- query strings ----------------------------------------------------------------------------------


def test_attack_query_parameters_never_reach_the_upstream(gateways, upstream) -> None:
    gw = gateways()
    token = gw.add("mallory")
    smuggled = [
        "key=sk-mine",  # an upstream (a gateway in front of a model) that takes its key from the query
        "beta=true&api-version=2099-01-01",
        "beta=true&beta=true",
        "beta=false",
        "BETA=true",
        "beta=true%00",
        "beta",
        "=true",
        "beta=true&",
        "x" * 5000,
    ]
    with httpx.Client(base_url=gw.url, headers={"x-api-key": token}, timeout=30, trust_env=False) as c:
        for path in ("/v1/messages", COUNT):
            assert c.post(f"{path}?beta=true", json=BODY).status_code == 200  # what real clients send
            for query in smuggled:
                reply = c.post(f"{path}?{query}", json=BODY)
                assert reply.status_code == 400, (query[:40], reply.status_code)
                error = reply.json()["error"]
                assert error["type"] == "invalid_request_error" and "beta=true" in error["message"]
    # The Python SDK's beta namespace works for both routes (this SDK marks beta calls without a query).
    sdk = gw.sdk(token, max_retries=0)
    assert sdk.beta.messages.create(**BODY).content
    assert sdk.beta.messages.count_tokens(model="m", messages=MSG).input_tokens > 0
    seen = upstream.requests(path=None)
    assert [r["query"] for r in seen] == ["beta=true", "beta=true", "", ""]
