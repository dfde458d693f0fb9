"""Attack: many concurrent /v1/messages requests on a small budget must not spend past it.

Before reservations, 16 concurrent requests on a $0.01 budget all passed the check (made before any
of them was booked) and booked 1.9x the budget. Now each reserves its worst case first; the booked
total never exceeds the budget plus one request's worst case, and the refused ones get a 429 that
names the budget. Real gateway (uvicorn), real Redis, the scripted upstream, real HTTP.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_llm_proxy import REAL_KEY, ProxyGateway, ProxyGateways

from gateway.llm.config import LLMProxySettings, ModelPrice
from kstest.upstream import ScriptedUpstream, text_reply

MODEL = "attack-model"
# $10/MTok in and out, so a request's worst case is a fraction of a $0.01 budget.
PRICE = ModelPrice(input=10.0, output=10.0, cache_write=12.5, cache_read=1.0)
MAX_TOKENS = 100
SPENT = {"input_tokens": 30, "output_tokens": MAX_TOKENS}  # what each request really uses
BODY = {"model": MODEL, "max_tokens": MAX_TOKENS, "messages": [{"role": "user", "content": "hello"}]}


JSON = {"content-type": "application/json"}


def encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()


def worst_case_usd(body: dict[str, Any]) -> float:
    """The documented reservation: body bytes / 3 at the dearest input rate + max_tokens at output."""
    return (-(-len(encode(body)) // 3) * PRICE.cache_write + body["max_tokens"] * PRICE.output) / 1e6


def worst_case_tokens(body: dict[str, Any]) -> int:
    return -(-len(encode(body)) // 3) + body["max_tokens"]


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream(api_key=REAL_KEY) as up:
        # Slow enough that every request is in flight before any is settled.
        up.script(default=text_reply("ok", delay=0.5, usage=SPENT))
        yield up


@pytest.fixture
def make_gateway(
    clean_redis: str, short_tmp: Path, upstream: ScriptedUpstream
) -> Iterator[Callable[..., ProxyGateway]]:
    with ProxyGateways(clean_redis, short_tmp) as gateways:

        def make(**budgets: Any) -> ProxyGateway:
            llm = LLMProxySettings(
                upstream_url=upstream.url, api_key=REAL_KEY, prices={MODEL: PRICE}, budgets=budgets
            )
            return gateways.start(llm)

        yield make


async def storm(url: str, tokens: list[str], per_agent: int, stream: bool = False) -> list[httpx.Response]:
    """``per_agent`` concurrent requests from each token at once; streamed ones are read to the end."""
    body = BODY | {"stream": True} if stream else BODY
    async with httpx.AsyncClient(base_url=url, timeout=60, trust_env=False) as client:

        async def one(token: str) -> httpx.Response:
            headers = JSON | {"x-api-key": token}
            request = client.build_request("POST", "/v1/messages", content=encode(body), headers=headers)
            response = await client.send(request, stream=True)
            await response.aread()
            return response

        return list(await asyncio.gather(*[one(t) for t in tokens for _ in range(per_agent)]))


def usage(gw: ProxyGateway, name: str | None = None) -> dict[str, Any]:
    with gw.api() as op:
        report = op.get("/api/usage").json()
    return report["swarm"] if name is None else report["agents"][name]


def assert_refusals(answers: list[httpx.Response], budget: str, text: str) -> None:
    refused = [a for a in answers if a.status_code == 429]
    assert refused, "nothing was refused: the budget did not hold"
    for a in refused:
        error = a.json()
        assert error["type"] == "error" and error["error"]["type"] == "rate_limit_error"
        assert text in error["error"]["message"], error["error"]["message"]
        assert a.headers["x-should-retry"] == "false" and a.headers["x-kswarm-budget"] == budget
    assert {a.status_code for a in answers} <= {200, 429}


def test_concurrent_requests_of_one_agent_stay_within_its_usd_budget(make_gateway, upstream) -> None:
    gw = make_gateway(agent={"usd": 0.01})
    token = gw.add("dev-1")
    answers = asyncio.run(storm(gw.url, [token], 16))
    ok = sum(a.status_code == 200 for a in answers)
    spent = usage(gw, "dev-1")
    assert spent["cost_usd"] <= 0.01 + worst_case_usd(BODY), f"{ok} of 16 passed: ${spent['cost_usd']}"
    assert ok >= 1 and spent["requests"] == ok == len(upstream.requests())  # refused ones never went up
    assert spent["cost_usd"] == pytest.approx(ok * PRICE.cost(30, MAX_TOKENS, 0, 0))  # settled to real usage
    assert spent["reserved_tokens"] == 0 and spent["reserved_usd"] == 0  # nothing left reserved
    assert_refusals(answers, "agent.usd", "agent dev-1's USD budget ($0.0100)")


def test_concurrent_requests_of_many_agents_stay_within_the_swarm_budget(make_gateway, upstream) -> None:
    gw = make_gateway(swarm={"usd": 0.01})
    tokens = [gw.add(f"dev-{i}") for i in range(4)]
    answers = asyncio.run(storm(gw.url, tokens, 4))
    swarm = usage(gw)
    assert swarm["cost_usd"] <= 0.01 + worst_case_usd(BODY), swarm
    assert swarm["requests"] == sum(a.status_code == 200 for a in answers) == len(upstream.requests())
    assert swarm["reserved_usd"] == 0
    assert_refusals(answers, "swarm.usd", "the swarm's USD budget ($0.0100)")


def test_concurrent_streams_stay_within_a_daily_token_budget(make_gateway, upstream) -> None:
    gw = make_gateway(agent={"tokens_per_day": 1000})
    token = gw.add("dev-1")
    answers = asyncio.run(storm(gw.url, [token], 16, stream=True))
    ok = [a for a in answers if a.status_code == 200]
    assert all(a.text.rstrip().endswith('{"type":"message_stop"}') for a in ok)
    spent = usage(gw, "dev-1")
    assert spent["total_tokens"] <= 1000 + worst_case_tokens(BODY), f"{len(ok)} of 16 passed"
    assert spent["today_tokens"] == spent["total_tokens"] == len(ok) * 130  # from message_start + delta
    assert_refusals(answers, "agent.tokens_per_day", "agent dev-1's daily token budget (1000)")
    assert "for this request (input estimate + max_tokens)" in next(
        a.json()["error"]["message"] for a in answers if a.status_code == 429
    )


def test_a_request_whose_worst_case_alone_exceeds_the_budget_is_refused(make_gateway, upstream) -> None:
    """max_tokens is the attacker's lever: a huge one is refused up front, not discovered afterwards."""
    gw = make_gateway(agent={"tokens": 5000})
    token = gw.add("dev-1")
    body = BODY | {"max_tokens": 64000}
    with httpx.Client(base_url=gw.url, headers={"x-api-key": token}, timeout=30, trust_env=False) as client:
        refused = client.post("/v1/messages", content=encode(body), headers=JSON)
        assert refused.status_code == 429
        message = refused.json()["error"]["message"]
        assert (
            f"0 used + 0 reserved by requests in flight + {worst_case_tokens(body)} for this request"
            in message
        )
        # A body without a usable max_tokens cannot be bounded: refused before anything is reserved.
        for bad in (
            {"model": MODEL, "messages": []},
            BODY | {"max_tokens": "9"},
            BODY | {"max_tokens": True},
            BODY | {"max_tokens": 0},
            BODY | {"max_tokens": 10**30},
            BODY | {"max_tokens": 8.5},
        ):
            answer = client.post("/v1/messages", json=bad)
            assert answer.status_code == 400 and answer.json()["error"]["type"] == "invalid_request_error"
            assert "max_tokens" in answer.json()["error"]["message"]
        answer = client.post("/v1/messages", content=b"not json", headers=JSON)
        assert answer.status_code == 400 and "not JSON" in answer.json()["error"]["message"]
    assert upstream.requests() == []


def test_a_duplicate_max_tokens_cannot_shrink_the_reservation(make_gateway, upstream) -> None:
    """Parser differential: the proxy reserved for one max_tokens while an upstream whose parser keeps
    the first of two keys would generate the other. Any duplicate key is refused instead, also one
    spelt with a \\u escape; a body with escapes but no duplicate passes."""
    gw = make_gateway(agent={"tokens": 5000})
    token = gw.add("dev-1")
    tail = b'"messages": [{"role": "user", "content": "hello"}]'
    attacks = [
        b'{"model": "attack-model", "max_tokens": 64000, ' + tail + b', "max_tokens": 10}',
        b'{"model": "attack-model", "max_tokens": 64000, ' + tail + b', "max\\u005ftokens": 10}',
        b'{"model": "claude-opus-4", "model": "attack-model", "max_tokens": 10, ' + tail + b"}",
    ]
    with httpx.Client(base_url=gw.url, headers={"x-api-key": token}, timeout=30, trust_env=False) as client:
        for attack in attacks:
            answer = client.post("/v1/messages", content=attack, headers=JSON)
            assert answer.status_code == 400, attack
            assert "duplicate key" in answer.json()["error"]["message"]
        fine = b'{"model": "attack-model", "max_tokens": 10, ' + tail.replace(b"hello", b"caf\\u00e9") + b"}"
        assert client.post("/v1/messages", content=fine, headers=JSON).status_code == 200
    assert len(upstream.requests()) == 1
