"""Budget leases (gateway/llm/leases.py): an agent's next requests are admitted without a Redis round
trip, and still never past a budget, nor past a hold or an operator's change on any replica.

Attacks, as an agent (or a race between replicas) would make them: spending through one gateway's lease
after a hold was set through another, after the operator lowered the budget, and a storm through two
gateways at once. Two gateways share one real Redis (replicas); the upstream is the scripted one.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from test_llm_books import assert_budget_refusal
from test_llm_budget_release import wait_for
from test_llm_proxy import REAL_KEY, ProxyGateway, ProxyGateways

from gateway.llm.books import BOOK_KEYS, LEASED, RESERVED, Reservation
from gateway.llm.config import LLMProxySettings, ModelPrice
from gateway.llm.leases import BudgetLeases
from gateway.llm.usage import UsageStore
from gateway.redis_pool import RedisBusy
from kstest.upstream import ScriptedUpstream, text_reply

MODEL = "lease-model"
PRICE = ModelPrice(input=10.0, output=10.0, cache_write=12.5, cache_read=1.0)
BODY = {"model": MODEL, "max_tokens": 50, "messages": [{"role": "user", "content": "hello"}]}
RAW = json.dumps(BODY).encode()
ESTIMATE = -(-len(RAW) // 3)
WORST = ESTIMATE + 50  # one request's worst case in tokens
FITS = {"input_tokens": ESTIMATE, "output_tokens": 50}  # what the upstream reports: the worst case
HEADERS = {"content-type": "application/json"}


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream(api_key=REAL_KEY) as up:
        up.script(default=text_reply("ok", usage=FITS))
        yield up


@pytest.fixture
def make_gateway(
    clean_redis: str, short_tmp: Path, upstream: ScriptedUpstream
) -> Iterator[Callable[..., ProxyGateway]]:
    fields = {"upstream_url": upstream.url, "api_key": REAL_KEY, "prices": {MODEL: PRICE}, "max_retries": 0}
    with ProxyGateways(clean_redis, short_tmp) as gateways:

        def make(**overrides: Any) -> ProxyGateway:
            gw = gateways.start(LLMProxySettings(**(fields | overrides)))
            # Leases are used while the token cache is (its subscription confirmed): a token check
            # answered from the cache shows it is.
            wait_for(lambda: answered_from_cache(gw), "the gateway's token cache in use")
            return gw

        yield make


def answered_from_cache(gw: ProxyGateway) -> bool:
    with gw.api() as op:
        op.get("/api/me").raise_for_status()
        metrics = op.get("/metrics").text
    found = re.search(r'^kswarm_token_checks_total\{source="cache"\} (\S+)$', metrics, re.M)
    return found is not None and float(found.group(1)) > 0


def post(gw: ProxyGateway, token: str, body: bytes = RAW) -> httpx.Response:
    with httpx.Client(base_url=gw.url, headers={"x-api-key": token}, timeout=30, trust_env=False) as c:
        return c.post("/v1/messages", content=body, headers=HEADERS)


def usage(gw: ProxyGateway, name: str) -> dict[str, Any]:
    with gw.api() as op:
        return op.get(f"/api/usage/{name}").json()


def counter(gw: ProxyGateway, name: str) -> float:
    with gw.api() as op:
        found = re.search(rf"^{name}_total (\S+)$", op.get("/metrics").text, re.M)
    return float(found.group(1)) if found else 0.0


def sums(redis_url: str) -> tuple[dict[str, str], dict[str, str]]:
    """The reserved and the leased sums, read from Redis itself."""

    async def read() -> tuple[dict[str, str], dict[str, str]]:
        redis = Redis.from_url(redis_url, decode_responses=True)
        try:
            return await redis.hgetall(RESERVED), await redis.hgetall(LEASED)
        finally:
            await redis.aclose()

    return asyncio.run(read())


def test_an_agents_next_requests_are_admitted_from_its_lease(make_gateway, clean_redis: str) -> None:
    gw = make_gateway(budgets={"agent": {"tokens": 1_000_000}})
    token = gw.add("dev-1")
    for _ in range(5):
        assert post(gw, token).status_code == 200
    # One request reserved in Redis and took a lease of 8 worst cases; the next four came out of it.
    assert counter(gw, "kswarm_llm_budget_leases") == 1
    assert counter(gw, "kswarm_llm_budget_lease_draws") == 4
    books = usage(gw, "dev-1")
    assert books["requests"] == 5 and books["total_tokens"] == 5 * WORST
    assert books["reserved_tokens"] == 0, "every request's own reservation was settled"
    assert books["leased_tokens"] == (8 - 4) * WORST, "what is left of the lease, held for the next ones"
    gw.stop()  # given back at shutdown: nothing stays reserved or leased
    assert sums(clean_redis) == ({}, {})


def test_no_leases_when_they_are_turned_off(make_gateway) -> None:
    gw = make_gateway(budgets={"agent": {"tokens": 1_000_000}}, budget_lease_requests=0)
    token = gw.add("dev-1")
    for _ in range(3):
        assert post(gw, token).status_code == 200
    assert counter(gw, "kswarm_llm_budget_leases") == counter(gw, "kswarm_llm_budget_lease_draws") == 0
    assert usage(gw, "dev-1")["leased_tokens"] == 0


def test_a_lease_takes_at_most_a_quarter_of_what_a_budget_has_left(make_gateway) -> None:
    """8 worst cases do not fit 4 times in a budget of 20: no lease, every request reserves in Redis,
    and the budget still admits exactly as many requests as it has room for."""
    gw = make_gateway(budgets={"agent": {"tokens": 20 * WORST}})
    token = gw.add("dev-1")
    answers = [post(gw, token).status_code for _ in range(21)]
    assert answers == [200] * 20 + [429]
    assert counter(gw, "kswarm_llm_budget_leases") == 0
    assert usage(gw, "dev-1")["total_tokens"] == 20 * WORST


def test_attack_a_hold_set_through_one_gateway_stops_the_agent_on_another(
    make_gateway, upstream: ScriptedUpstream
) -> None:
    """mallory holds a lease on gateway B, then books more than it reserved through gateway A (a hold).
    Without the hold reaching B's lease, B would go on admitting mallory from it."""
    a, b = make_gateway(budgets={"agent": {"tokens": 1_000_000}}), make_gateway()
    token = a.add("mallory")
    assert post(b, token).status_code == 200 and counter(b, "kswarm_llm_budget_leases") == 1
    upstream.script(text_reply("long", usage={"input_tokens": 10, "output_tokens": 5000}))
    assert post(a, token).status_code == 200
    assert usage(a, "mallory")["hold"], "the answer is booked (and the hold announced) first"
    assert_budget_refusal(post(b, token), "agent.hold")
    assert len(upstream.requests()) == 2
    assert counter(b, "kswarm_llm_budget_lease_draws") == 0


def test_attack_a_lowered_budget_holds_at_once_on_every_gateway(make_gateway, upstream) -> None:
    """dev-1 holds a lease on gateway B; the operator lowers its budget through gateway A below what it
    has used. Its next request through B is judged on the new budget, not admitted from the lease."""
    a, b = make_gateway(budgets={"agent": {"tokens": 1_000_000}}), make_gateway()
    token = a.add("dev-1")
    assert post(b, token).status_code == 200 and counter(b, "kswarm_llm_budget_leases") == 1
    with a.api() as op:
        assert op.put("/api/usage/dev-1/budget", json={"tokens": WORST}).status_code == 200
    message = assert_budget_refusal(post(b, token), "agent.tokens")
    assert f"has used {WORST} of its token budget ({WORST})" in message
    assert len(upstream.requests()) == 1
    # An operator's reset is a change too: raised again, dev-1 runs (through B, from a new reservation).
    with a.api() as op:
        assert op.put("/api/usage/dev-1/budget", json={"tokens": 1_000_000}).status_code == 200
    assert post(b, token).status_code == 200


def test_attack_a_storm_through_two_gateways_books_no_more_than_the_budget(
    make_gateway, upstream: ScriptedUpstream, clean_redis: str
) -> None:
    """Waves of concurrent requests of two agents through two gateways, leases granted on both: every
    answer books its worst case, and the books end within the swarm's budget to the token."""
    budget = 100 * WORST
    a = make_gateway(budgets={"swarm": {"tokens": budget}})
    b = make_gateway(budgets={"swarm": {"tokens": budget}})
    tokens = [a.add("dev-1"), a.add("dev-2")]
    upstream.script(default=text_reply("ok", usage=FITS, delay=0.05))

    async def wave() -> list[int]:
        async with httpx.AsyncClient(timeout=60, trust_env=False) as client:

            async def one(gw: ProxyGateway, token: str) -> int:
                headers = HEADERS | {"x-api-key": token}
                return (await client.post(f"{gw.url}/v1/messages", content=RAW, headers=headers)).status_code

            calls = [one(gw, t) for gw in (a, b) for t in tokens for _ in range(8)]
            return list(await asyncio.gather(*calls))

    answers: list[int] = []
    while 429 not in answers[-32:]:
        answers += asyncio.run(wave())
        assert len(answers) <= 32 * 10, "the budget never stopped the storm"
    assert set(answers) <= {200, 429}
    assert counter(a, "kswarm_llm_budget_lease_draws") + counter(b, "kswarm_llm_budget_lease_draws") > 0
    with a.api() as op:
        swarm = op.get("/api/usage").json()["swarm"]
    ok = answers.count(200)
    assert swarm["requests"] == ok == len(upstream.requests())
    assert swarm["total_tokens"] == ok * WORST <= budget
    a.stop()
    b.stop()
    assert sums(clean_redis) == ({}, {})


def test_an_agent_holds_one_lease_whichever_gateway_it_calls(make_gateway) -> None:
    """A lease per gateway would let one agent hold a quarter of every budget's rest per replica."""
    a, b = make_gateway(), make_gateway()
    token = a.add("dev-1")
    assert post(a, token).status_code == 200 and post(b, token).status_code == 200
    assert counter(a, "kswarm_llm_budget_leases") == 1 and counter(b, "kswarm_llm_budget_leases") == 0
    assert usage(a, "dev-1")["leased_tokens"] == 8 * WORST


def test_a_refusal_only_leases_cause_says_so_and_claims_no_notice(make_gateway) -> None:
    """dev-1's lease on gateway A holds 8 worst cases; a big request of dev-1 through B would fit the
    budget without it. Refused (the lease is held), but the message says what holds the budget, and no
    'budget exhausted' notice goes to #ops: the lease ends within seconds. Once A gives it back (here:
    A stops), the same request passes."""
    budget = 40 * WORST
    a = make_gateway(budgets={"agent": {"tokens": budget}})
    b = make_gateway(budgets={"agent": {"tokens": budget}})
    token = a.add("dev-1")
    assert post(a, token).status_code == 200 and usage(a, "dev-1")["leased_tokens"] == 8 * WORST
    big = json.dumps(BODY | {"max_tokens": 35 * WORST}).encode()
    need = -(-len(big) // 3) + 35 * WORST
    assert WORST + need <= budget < WORST + 8 * WORST + need
    message = assert_budget_refusal(post(b, token, big), "agent.tokens")
    assert f"{8 * WORST} held by gateways' budget leases + {need} for this request" in message
    assert b.ops_notices() == []
    a.stop()
    assert post(b, token, big).status_code == 200


@asynccontextmanager
async def one_gateways_books(redis_url: str, draw: Callable[..., Any]) -> AsyncIterator[Books]:
    """One gateway's books (its usage store and leases, on the real Redis), after dev-1's first request
    took a lease and was settled, with the draw script replaced by ``draw(real_script)``; then the
    second request, admitted from the lease."""
    redis = Redis.from_url(redis_url, decode_responses=True)
    try:
        llm = LLMProxySettings(prices={MODEL: PRICE})
        leases = BudgetLeases(redis, llm, BOOK_KEYS, lambda: 1)
        store = UsageStore(redis, llm, leases)
        first = await store.reserve("dev-1", MODEL, len(RAW), 50)
        assert isinstance(first, Reservation) and len(leases) == 1
        await store.settle(first, MODEL, None)
        leases._draw = draw(leases._draw)  # type: ignore[method-assign]
        second = await store.reserve("dev-1", MODEL, len(RAW), 50)
        assert isinstance(second, Reservation) and second.drawn is not None
        yield Books(redis, leases, store, second)
    finally:
        await redis.aclose()


@dataclass
class Books:
    redis: Redis
    leases: BudgetLeases
    store: UsageStore
    second: Reservation

    async def sums(self) -> tuple[dict[str, str], dict[str, str]]:
        return await self.redis.hgetall(LEASED), await self.redis.hgetall(RESERVED)

    async def leased(self) -> str | None:
        return await self.redis.hget(LEASED, "agent:dev-1:tokens")


async def _draw_that_fails(redis_url: str) -> None:
    """A request admitted from a lease whose draw script fails (Redis busy): its share must stay held,
    in the lease's record, through the lease's give-back, until the request itself is settled."""

    def busy(real: Any) -> Any:
        async def fail(*args: Any, **kwargs: Any) -> None:
            raise RedisBusy(64, 1.0)

        return fail

    async with one_gateways_books(redis_url, busy) as books:
        await books.second.drawn  # type: ignore[misc]
        assert books.second.draw_failed
        await books.leases.close()  # gives back what the replica has left: 7 worst cases, not 8
        assert await books.leased() == str(WORST)
        await books.store.settle(books.second, MODEL, None)
        assert await books.sums() == ({}, {})
        assert books.leases.owned_ids() == []


def test_a_request_whose_draw_failed_stays_held_until_it_is_settled(clean_redis: str) -> None:
    asyncio.run(_draw_that_fails(clean_redis))


async def _draw_whose_reply_is_lost(redis_url: str) -> None:
    """The draw script ran, its reply was lost: the request has its own reservation after all, and its
    settlement must not take its share from the lease a second time."""

    def lost(real: Any) -> Any:
        async def ran(*args: Any, **kwargs: Any) -> None:
            await real(*args, **kwargs)
            raise RedisBusy(64, 1.0)

        return ran

    async with one_gateways_books(redis_url, lost) as books:
        await books.second.drawn  # type: ignore[misc]
        assert books.second.draw_failed
        await books.store.settle(books.second, MODEL, None)
        assert await books.leased() == str(7 * WORST), "the replica's rest"
        await books.leases.close()
        assert await books.sums() == ({}, {})


def test_a_draw_whose_reply_was_lost_is_taken_from_its_lease_once(clean_redis: str) -> None:
    asyncio.run(_draw_whose_reply_is_lost(clean_redis))


async def _give_back_twice(redis_url: str) -> None:
    """A give-back retried (its first reply lost) must not take the share of a draw still in flight."""
    gate = asyncio.Event()

    def late(real: Any) -> Any:
        async def after_the_gate(*args: Any, **kwargs: Any) -> Any:
            await gate.wait()
            return await real(*args, **kwargs)

        return after_the_gate

    async with one_gateways_books(redis_url, late) as books:
        lease = books.leases.take_back("dev-1")
        assert lease is not None and lease.tokens == 7 * WORST
        rest = [lease.id, repr(time.time()), lease.tokens, lease.nusd]
        for _ in range(2):  # the same give-back, twice
            await books.leases._release(keys=BOOK_KEYS, args=rest)
        assert await books.leased() == str(WORST), "the draw's share is held"
        gate.set()
        await books.second.drawn  # type: ignore[misc]
        assert await books.redis.hget(RESERVED, "agent:dev-1:tokens") == str(WORST)
        await books.store.settle(books.second, MODEL, None)
        assert await books.sums() == ({}, {})


def test_a_lease_is_given_back_once_and_a_draw_in_flight_keeps_its_share(clean_redis: str) -> None:
    asyncio.run(_give_back_twice(clean_redis))


async def _lease_as_a_crashed_gateway(redis_url: str) -> None:
    """A gateway that took a lease (2 s reservation TTL) and died: nobody gives it back."""
    redis = Redis.from_url(redis_url, decode_responses=True)
    try:
        llm = LLMProxySettings(prices={MODEL: PRICE}, reservation_ttl=2)
        store = UsageStore(redis, llm, BudgetLeases(redis, llm, BOOK_KEYS, lambda: 1))
        reservation = await store.reserve("dev-1", MODEL, len(RAW), 50)
        assert isinstance(reservation, Reservation)
        assert store.leases is not None and len(store.leases) == 1
        await store.settle(reservation, MODEL, None)
    finally:
        await redis.aclose()


def test_a_crashed_gateways_lease_expires(make_gateway, clean_redis: str) -> None:
    gw = make_gateway(budgets={"agent": {"tokens": 1_000_000}}, budget_lease_requests=0)
    token = gw.add("dev-1")
    asyncio.run(_lease_as_a_crashed_gateway(clean_redis))
    assert usage(gw, "dev-1")["leased_tokens"] == 8 * WORST
    # Its expiry is checked by the next script that runs: this gateway's reservations of dev-1.
    wait_for(
        lambda: post(gw, token).status_code == 200 and usage(gw, "dev-1")["leased_tokens"] == 0,
        "the dead gateway's lease to expire",
    )
    assert usage(gw, "dev-1")["reserved_tokens"] == 0
