"""What a kernel cost: the LLM proxy's usage of an agent is booked to the task it holds a claim on while
spending it (claims give the window), else to ``-``, from the agent's very first call on; per task, agent
and swarm, and per window (what the dataset build asks for each record). Usage is booked through the
proxy's own usage store, as the proxy does for every model call."""

from __future__ import annotations

import asyncio
import time

from monitor_kit import MonitorGateway
from redis import Redis

from gateway.llm.books import Usage
from gateway.monitor import keys
from gateway.services import LLM_USAGE
from gateway.tasks.models import TasksSettings
from gateway.tasks.plugin import TasksPlugin
from kstest.waiting import wait_for


def book(gw: MonitorGateway, agent: str, tokens_in: int, tokens_out: int) -> None:
    store = gw.app.state.ctx.services.get(LLM_USAGE)
    assert gw._loop is not None
    usage = Usage(input_tokens=tokens_in, output_tokens=tokens_out)
    asyncio.run_coroutine_threadsafe(store.record(agent, None, usage), gw._loop).result(10)


def cost(gw: MonitorGateway) -> dict:
    with gw.client(gw.operator_token) as op:
        reply = op.get("/api/monitor/cost")
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_usage_is_booked_to_the_task_held_while_spending(mon_gateway: MonitorGateway) -> None:
    gw = mon_gateway
    dev = gw.add_principal("dev-1")
    redis = Redis.from_url(gw.redis_url, decode_responses=True)
    with gw.client(gw.operator_token) as op:
        assert op.post("/api/tasks", json={"id": "softmax", "title": "Softmax"}).status_code == 201
    wait_for(lambda: redis.hexists(keys.USAGE_LAST, keys.USAGE_WATCHING), what="the monitor watching usage")
    book(gw, "dev-1", 10, 0)  # dev-1's first call, seen by a watching monitor: booked (to no task)
    wait_for(lambda: redis.hget(keys.USAGE_LAST, "dev-1:tokens") == "10", what="dev-1's first call sampled")
    with gw.client(dev) as agent:
        assert agent.post("/api/tasks/softmax/claim").status_code == 200
    wait_for(lambda: redis.hlen(keys.CLAIMS_OPEN) == 1, what="the claim window opened")
    start = time.time()
    book(gw, "dev-1", 1_000, 234)
    wait_for(lambda: cost(gw)["by_task"].get("softmax", {}).get("tokens") == 1_234, what="booked to softmax")
    with gw.client(dev) as agent:
        assert agent.post("/api/tasks/softmax/release").status_code == 200
    wait_for(lambda: redis.hlen(keys.CLAIMS_OPEN) == 0, what="the claim window closed")
    book(gw, "dev-1", 500, 0)
    report = wait_for(lambda: (r := cost(gw))["by_task"].get("-", {}).get("tokens") == 510 and r, what="to -")
    assert report["by_task"]["softmax"]["tokens"] == 1_234, "spent after the release is not the task's"
    assert report["by_agent"]["dev-1"]["tokens"] == 1_744 and report["swarm"]["tokens"] == 1_744
    assert report["by_task"]["softmax"]["cost_usd"] > 0
    with gw.client(gw.operator_token) as op:
        window = op.get(
            "/api/monitor/cost/window",
            params={"task": "softmax", "agent": "dev-1", "since": start - 120, "until": time.time() + 60},
        ).json()
        assert window["tokens"] == 1_234
        assert op.get("/api/monitor/cost/window", params={"task": "x", "agent": "dev-1"}).status_code == 422
        claims = op.get("/api/monitor/claims", params={"task": "softmax"}).json()
    assert [(c["agent"], c["how"]) for c in claims] == [("dev-1", "released")]
    with gw.client(dev) as agent:
        assert agent.get("/api/monitor/cost").status_code == 403


def test_a_claim_shorter_than_any_sample_is_booked_its_own_cost(clean_redis: str, short_tmp) -> None:
    """A scripted developer claims, works and finishes in about a second; with samples minutes apart its
    spending once went to ``-`` and the accepted kernel read $0. Each call is booked to the tasks held
    when the proxy booked it, whatever the monitor's pace."""
    from monitor_kit import fast_monitor

    gw = MonitorGateway(short_tmp / "home", clean_redis)
    gw.monitor_settings = fast_monitor(sample_s=3600.0)  # one sample at start, none while the claim lasts
    # done on the developer's word: the booking is watched here, not the merge rule (test_forge_task_done)
    gw.extra = (TasksPlugin(TasksSettings(done_needs_merged_pr=False)),)
    gw.start()
    try:
        # The board answers slowly, as under load: what a call is booked to is still what was held when
        # the proxy booked it, not what is held by the time the board answered.
        store = gw.app.state.ctx.services.get(LLM_USAGE)
        held = store.holdings
        assert held is not None

        async def slow_board(name: str) -> list[str] | None:
            await asyncio.sleep(0.5)
            return await held(name)

        store.holdings = slow_board
        dev = gw.add_principal("dev-1")
        with gw.client(gw.operator_token) as op:
            assert op.post("/api/tasks", json={"id": "relu", "title": "ReLU"}).status_code == 201
        book(gw, "dev-1", 7, 0)  # before the claim: nobody's task
        with gw.client(dev) as agent:
            assert agent.post("/api/tasks/relu/claim").status_code == 200
            book(gw, "dev-1", 300, 45)
            book(gw, "dev-1", 600, 55)
            assert agent.post("/api/tasks/relu/done", json={"result": "merged"}).status_code == 200
        book(gw, "dev-1", 90, 0)  # after it: nobody's again

        def booked() -> dict | None:  # every call, the last one (after the claim) included
            r = cost(gw)
            got = {t: r["by_task"].get(t, {}).get("tokens") for t in ("relu", "-")}
            return r if got == {"relu": 1_000, "-": 97} else None

        report = wait_for(booked, what="relu's calls to relu, the others to -")
        assert report["by_agent"]["dev-1"]["tokens"] == 1_097
        assert report["by_task"]["relu"]["cost_usd"] > 0
    finally:
        gw.stop()
