"""Attention's job sources against the real job runner: a pool with queued jobs and no worker, a budget
near its limit (the LLM proxy's own usage store), each with its reason and link — and the Attention page
lists them for the operator."""

from __future__ import annotations

import asyncio
from pathlib import Path

from jobs_kit import seed_jobs
from monitor_ui_kit import MonitorUiGateway

from gateway.llm.books import Usage
from gateway.services import LLM_USAGE
from kstest.waiting import wait_for


def attention(gw: MonitorUiGateway) -> dict[str, dict]:
    with gw.client(gw.operator_token) as op:
        reply = op.get("/api/attention")
    assert reply.status_code == 200, reply.text
    return {i["key"]: i for i in reply.json()["items"]}


def test_a_pool_without_a_worker_and_a_budget_near_its_limit(
    mon_ui: MonitorUiGateway, short_tmp: Path
) -> None:
    seeded = seed_jobs(mon_ui, short_tmp)  # a job queued on npu-910c, which no worker serves
    pool = wait_for(
        lambda: next((i for k, i in attention(mon_ui).items() if i["kind"] == "pool"), None),
        what="the pool without a worker",
    )
    assert pool["subject"] == "npu-910c" and pool["severity"] == "critical", pool
    assert "no worker" in (pool["title"] + pool["reason"]).lower()
    # dev-2 gets a token budget, then spends 85 % of it (booked as the proxy books every call).
    with mon_ui.client(mon_ui.operator_token) as op:
        reply = op.put("/api/usage/dev-2/budget", json={"tokens": 1000})
        assert reply.status_code in (200, 204), reply.text
    store = mon_ui.app.state.ctx.services.get(LLM_USAGE)
    assert mon_ui._loop is not None
    coro = store.record("dev-2", None, Usage(input_tokens=800, output_tokens=50))
    asyncio.run_coroutine_threadsafe(coro, mon_ui._loop).result(10)
    budget = wait_for(
        lambda: next((i for i in attention(mon_ui).values() if i["kind"] == "budget"), None),
        what="the budget item",
    )
    assert budget["subject"] == "dev-2" and "85%" in budget["title"] and budget["severity"] == "warning", (
        budget
    )
    with mon_ui.login() as browser:
        page = browser.get("/ui/attention", headers={"Accept": "text/html"}).text
    assert f'data-key="{pool["key"]}"' in page and f'data-key="{budget["key"]}"' in page
    assert seeded.queued
