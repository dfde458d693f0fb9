"""``kswarm cost`` against a real gateway (LLM proxy's usage store, monitor, task board): the ledger per
agent and task, labelled an estimate with the rates used when the model has no price of its own; one
kernel's cost from the last dataset build; refusals as one line and an exit code.

Attack: an agent's token asks for the operators' cost ledger (``/api/monitor/cost``, ``.../window``) and is
refused, through the CLI and over HTTP."""

from __future__ import annotations

import asyncio
import json
import time

from cli_kit import Kswarm
from redis import Redis

from gateway.llm.books import Usage
from gateway.monitor import keys
from gateway.services import LLM_USAGE
from kstest.gateway import GatewayThread

PRICED = "claude-sonnet-4-5"
LOCAL = "llama-local-7b"  # not in the price table: priced at its default rate, an estimate


def book(gw: GatewayThread, agent: str, model: str, tokens_in: int, tokens_out: int) -> None:
    """One call booked as the LLM proxy books it (its own usage store)."""
    assert gw.app is not None and gw._loop is not None
    store = gw.app.state.ctx.services.get(LLM_USAGE)
    usage = Usage(input_tokens=tokens_in, output_tokens=tokens_out)
    asyncio.run_coroutine_threadsafe(store.record(agent, model, usage), gw._loop).result(10)


def wait_for(predicate, what: str, timeout: float = 20.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_kswarm_cost_per_agent_and_task_says_what_is_an_estimate(
    gateway: GatewayThread, kswarm: Kswarm
) -> None:
    gw = gateway
    alice = gw.add_principal("alice")
    gw.add_principal("bob")
    redis = Redis.from_url(gw.redis_url, decode_responses=True)
    with gw.client(gw.operator_token) as op:
        assert op.post("/api/tasks", json={"id": "softmax", "title": "Softmax"}).status_code == 201
    wait_for(lambda: redis.hexists(keys.USAGE_LAST, keys.USAGE_WATCHING), "the monitor watching usage")
    with gw.client(alice) as agent:
        assert agent.post("/api/tasks/softmax/claim").status_code == 200
    wait_for(lambda: redis.hlen(keys.CLAIMS_OPEN) == 1, "the claim window opened")
    book(gw, "alice", PRICED, 1_000, 200)
    book(gw, "bob", LOCAL, 2_000, 100)

    def both_booked() -> dict | bool:
        ran = kswarm("cost", "--json", url=gw.url, token=gw.operator_token)
        answer = json.loads(ran.stdout) if ran.code == 0 else {}
        return answer if answer.get("total", {}).get("tokens") == 3_300 else False

    everything = wait_for(both_booked, "both calls booked")
    assert everything["estimate"] is True
    assert everything["prices"] == {LOCAL: {"input_per_mtok": 3.0, "output_per_mtok": 15.0}}
    lines = {(x["task"], x["agent"]): x for x in everything["lines"]}
    assert lines[("softmax", "alice")]["estimate"] is False and lines[("softmax", "alice")]["tokens"] == 1_200
    assert lines[("-", "bob")]["estimate"] is True and lines[("-", "bob")]["model"] == LOCAL

    ran = kswarm("cost", "--agent", "alice", "--json", url=gw.url, token=gw.operator_token)
    mine = json.loads(ran.stdout)
    assert (
        [x["agent"] for x in mine["lines"]] == ["alice"] and mine["estimate"] is False and not mine["prices"]
    )
    assert mine["by_task"] == {"softmax": {"tokens": 1_200.0, "cost_usd": (1_000 * 3 + 200 * 15) / 1e6}}

    ran = kswarm("cost", "--task", "-", url=gw.url, token=gw.operator_token)
    assert ran.code == 0, ran.stderr
    assert "bob" in ran.stdout and "alice" not in ran.stdout and "(estimate)" in ran.stdout
    assert f"{LOCAL}: $3.0 in / $15.0 out per MTok" in " ".join(ran.stdout.split()), ran.stdout

    with gw.client(gw.operator_token) as op:
        window = op.get(
            "/api/monitor/cost/window",
            params={"task": "-", "agent": "bob", "since": 0, "until": time.time() + 60},
        ).json()
    assert window["tokens"] == 2_100 and window["estimate"] is True and window["model"] == LOCAL
    assert window["prices"] == {LOCAL: {"input_per_mtok": 3.0, "output_per_mtok": 15.0}}


def test_kswarm_cost_refusals_are_one_line(gateway: GatewayThread, kswarm: Kswarm) -> None:
    gw = gateway
    agent = gw.add_principal("mallory")
    ran = kswarm("cost", url=gw.url, token=agent)
    assert ran.code == 1 and ran.stdout == "", (ran.code, ran.stdout)
    assert "needs operator" in ran.error_line()
    with gw.client(agent) as c:
        assert c.get("/api/monitor/cost").status_code == 403
        window = {"task": "-", "agent": "mallory", "since": 0, "until": 1}
        assert c.get("/api/monitor/cost/window", params=window).status_code == 403

    ran = kswarm("cost", "--kernel", "kernels/x.py", "--pr", "3", url=gw.url, token=gw.operator_token)
    assert ran.code == 2 and "not both" in ran.error_line()
    ran = kswarm("cost", "--kernel", "kernels/x.py", url=gw.url, token=gw.operator_token)
    assert ran.code == 4 and "kswarm dataset build" in ran.error_line(), ran.stderr
