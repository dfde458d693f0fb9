"""Reservations never leak: failed, cut and abandoned requests release them; a dead gateway's expire.

Each test sets a budget that holds one request's worst case and not two, so a leaked reservation
shows as a refusal of the next request.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from test_llm_proxy import REAL_KEY, ProxyGateway, ProxyGateways

from gateway.llm.books import Reservation
from gateway.llm.config import LLMProxySettings, ModelPrice
from gateway.llm.usage import UsageStore
from kstest.gateway import GatewayProcess, free_port
from kstest.upstream import ScriptedUpstream, error_reply, text_reply

MODEL = "leak-model"
PRICE = ModelPrice(input=10.0, output=10.0, cache_write=12.5, cache_read=1.0)
BODY = {"model": MODEL, "max_tokens": 100, "messages": [{"role": "user", "content": "hello"}]}
RAW = json.dumps(BODY).encode()
WORST = -(-len(RAW) // 3) + 100  # one request's reservation in tokens
ONE_AT_A_TIME = {"agent": {"tokens": WORST + WORST // 2}}  # fits one reservation, never two
HEADERS = {"content-type": "application/json"}


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream(api_key=REAL_KEY) as up:
        yield up


@pytest.fixture
def make_gateway(
    clean_redis: str, short_tmp: Path, upstream: ScriptedUpstream
) -> Iterator[Callable[..., ProxyGateway]]:
    fields = {"upstream_url": upstream.url, "api_key": REAL_KEY, "prices": {MODEL: PRICE}}
    fields |= {"budgets": ONE_AT_A_TIME, "max_retries": 0}
    with ProxyGateways(clean_redis, short_tmp) as gateways:
        yield lambda **overrides: gateways.start(LLMProxySettings(**(fields | overrides)))


def post(gw_url: str, token: str, body: bytes = RAW) -> httpx.Response:
    with httpx.Client(base_url=gw_url, headers={"x-api-key": token}, timeout=30, trust_env=False) as c:
        return c.post("/v1/messages", content=body, headers=HEADERS)


def agent_usage(gw: ProxyGateway, name: str) -> dict[str, Any]:
    with gw.api() as op:
        return op.get(f"/api/usage/{name}").json()


def test_upstream_errors_release_the_reservation_and_book_nothing(make_gateway, upstream) -> None:
    gw = make_gateway()
    token = gw.add("dev-1")
    upstream.script(error_reply(400, "bad request"), error_reply(529, "overloaded"), error_reply(500))
    assert [post(gw.url, token).status_code for _ in range(3)] == [400, 529, 500]
    dead = make_gateway(upstream_url=f"http://127.0.0.1:{free_port()}")  # nothing listens there
    assert post(dead.url, token).status_code == 502
    spent = agent_usage(gw, "dev-1")
    assert spent["total_tokens"] == 0 and spent["requests"] == 0 and spent["reserved_tokens"] == 0
    upstream.script(text_reply("ok", usage={"input_tokens": 5, "output_tokens": 5}))
    assert post(gw.url, token).status_code == 200  # nothing leaked: the one reservation still fits


def test_a_client_that_leaves_mid_stream_releases_its_reservation(make_gateway, upstream) -> None:
    gw = make_gateway()
    token = gw.add("dev-1")
    upstream.script(
        text_reply("a b c d e f g h", chunk_delay=0.5, usage={"input_tokens": 20, "output_tokens": 60})
    )
    body = json.dumps(BODY | {"stream": True}).encode()
    with (
        httpx.Client(timeout=30, trust_env=False) as client,
        client.stream(
            "POST", f"{gw.url}/v1/messages", content=body, headers=HEADERS | {"x-api-key": token}
        ) as r,
    ):
        assert r.status_code == 200
        seen = b""
        for chunk in r.iter_raw():  # until the first content delta, then hang up
            seen += chunk
            if b"content_block_delta" in seen:
                break

    def settled() -> dict[str, Any] | None:
        spent = agent_usage(gw, "dev-1")
        return spent if spent["requests"] == 1 else None

    spent = wait_for(settled, "the abandoned stream to be settled")
    # Booked what was seen: the input from message_start, and at least one token per delta received
    # (never the 60 of a message_delta it never got, nor the whole reservation).
    assert spent["input_tokens"] == 20 and 1 <= spent["output_tokens"] < 60
    assert spent["reserved_tokens"] == 0
    upstream.script(text_reply("ok", usage={"input_tokens": 5, "output_tokens": 5}))
    assert post(gw.url, token).status_code == 200


def test_an_answer_that_does_not_report_usage_books_its_worst_case(make_gateway, upstream) -> None:
    """An upstream that leaves usage out (or garbles it) must not make requests free."""
    gw = make_gateway(budgets={})
    token = gw.add("dev-1")
    garbled = {"input_tokens": "n/a", "output_tokens": None}
    upstream.script(text_reply("no usage", usage=garbled), text_reply("no usage", usage=garbled))
    assert post(gw.url, token).status_code == 200
    spent = agent_usage(gw, "dev-1")
    assert spent["requests"] == 1 and spent["total_tokens"] == WORST and spent["reserved_tokens"] == 0
    # Streamed: message_start's input is garbled too, and message_delta has no output count.
    streamed = json.dumps(BODY | {"stream": True}).encode()
    assert post(gw.url, token, streamed).status_code == 200
    spent = agent_usage(gw, "dev-1")
    assert spent["requests"] == 2 and spent["total_tokens"] == WORST + -(-len(streamed) // 3) + 100


async def _reserve_as_a_crashed_gateway(redis_url: str, ttl: float) -> Reservation:
    redis = Redis.from_url(redis_url, decode_responses=True)
    try:
        llm = LLMProxySettings(prices={MODEL: PRICE}, budgets=ONE_AT_A_TIME, reservation_ttl=ttl)
        reservation = await UsageStore(redis, llm).reserve("dev-1", MODEL, len(RAW), 100)
        assert isinstance(reservation, Reservation)
        return reservation
    finally:
        await redis.aclose()


def wait_for(check: Callable[[], Any], what: str, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_an_expired_reservation_stops_counting(make_gateway, upstream, clean_redis: str) -> None:
    gw = make_gateway()
    token = gw.add("dev-1")
    # A gateway reserved and died before settling (nobody renews it): 2 s to live.
    asyncio.run(_reserve_as_a_crashed_gateway(clean_redis, ttl=2))
    refused = post(gw.url, token)
    assert refused.status_code == 429
    assert f"0 used + {WORST} reserved by requests in flight" in refused.json()["error"]["message"]
    upstream.script(default=text_reply("ok", usage={"input_tokens": 5, "output_tokens": 5}))
    wait_for(lambda: post(gw.url, token).status_code == 200, "the dead reservation to expire")
    assert agent_usage(gw, "dev-1")["reserved_tokens"] == 0


@pytest.mark.slow
def test_a_killed_gateways_reservations_expire_and_a_live_ones_are_renewed(
    clean_redis: str, short_tmp: Path, upstream: ScriptedUpstream
) -> None:
    """kill -9 of a gateway in the middle of a stream: its reservation outlives it by the TTL only.
    Meanwhile another gateway's own long request keeps its reservation past the TTL (renewed)."""
    env = {
        "KSWARM_LLM_UPSTREAM_URL": upstream.url,
        "KSWARM_LLM_API_KEY": REAL_KEY,
        "KSWARM_LLM_PRICES": json.dumps({MODEL: PRICE.model_dump()}),
        "KSWARM_LLM_BUDGETS": json.dumps(ONE_AT_A_TIME),
        "KSWARM_LLM_RESERVATION_TTL": "2",
    }
    doomed = GatewayProcess(short_tmp / "doomed", clean_redis, extra_env=env)
    doomed.start()
    try:
        token = doomed.add_principal("dev-1")
        upstream.script(text_reply("x " * 40, chunk_delay=3.0))  # 5 events 3 s apart: a 15 s stream
        body = json.dumps(BODY | {"stream": True}).encode()
        with (
            httpx.Client(timeout=30, trust_env=False) as client,
            client.stream(
                "POST", f"{doomed.url}/v1/messages", content=body, headers=HEADERS | {"x-api-key": token}
            ) as r,
        ):
            assert r.status_code == 200
            started = time.monotonic()
            events = r.iter_raw()  # kept: a dropped iterator closes the response (a disconnect)
            next(events)
            # Past twice the TTL the stream's reservation is still held: its gateway renews it.
            time.sleep(max(0.0, started + 7 - time.monotonic()))
            assert post(doomed.url, token).status_code == 429
            doomed.stop(signal.SIGKILL)  # mid-stream: nobody will settle or renew it
    finally:
        doomed.stop()
    fields = {"upstream_url": upstream.url, "api_key": REAL_KEY, "prices": {MODEL: PRICE}}
    survivor = ProxyGateway(
        clean_redis, short_tmp / "survivor", LLMProxySettings(**fields, budgets=ONE_AT_A_TIME)
    )
    try:
        upstream.script(default=text_reply("ok", usage={"input_tokens": 5, "output_tokens": 5}))
        # The dead gateway's reservation counted while it was renewed; now it expires, and nothing
        # of it stays reserved (no settlement ever came).
        wait_for(
            lambda: post(survivor.url, token).status_code == 200, "the dead gateway's reservation to expire"
        )
        with survivor.api() as op:
            assert op.get("/api/usage/dev-1").json()["reserved_tokens"] == 0
    finally:
        survivor.stop()
