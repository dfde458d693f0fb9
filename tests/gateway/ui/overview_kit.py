"""A swarm with something in every part of the overview, made through the components' own routes: tasks
open, claimed and done; a PR waiting and one merged by the gate; jobs finished, running and queued
(``jobs_kit``); agents working, idle, stalled and never started; model calls booked by the LLM proxy."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from git_kit import open_demo_pr
from jobs_kit import SeededJobs, jobs_plugin, seed_jobs
from ui_kit import UiGateway, ui_plugins

from gateway import keys as gateway_keys
from gateway.llm.books import Usage
from gateway.llm.config import BudgetLimit, BudgetSettings, LLMProxySettings
from gateway.monitor.plugin import MonitorPlugin
from gateway.monitor.settings import MonitorSettings
from gateway.plugin import Plugin
from gateway.plugins import get_plugin
from gateway.search.plugin import SearchPlugin
from gateway.services import LLM_USAGE

FAILED = ("failed", "error", "timeout")


class OverviewGateway(UiGateway):
    """The monitor feeding fast; an agent stalls after a minute (beats in a test are never that old)."""

    def plugins(self) -> list[Plugin[Any]]:
        fast = MonitorSettings(stall_after_s=60.0, attention_every_s=0.3, sample_s=0.3, lease_s=5.0)
        swarm_budget = BudgetSettings(swarm=BudgetLimit(usd_per_day=5.0))
        llm = get_plugin("llm", LLMProxySettings(budgets=swarm_budget))
        return ui_plugins(jobs_plugin(), MonitorPlugin(fast), SearchPlugin(), llm)


@dataclass
class Swarm:
    jobs: SeededJobs
    waiting_pr: int
    merged_pr: int


def call(gw: UiGateway, token: str, method: str, path: str, **kw: Any) -> httpx.Response:
    with gw.client(token) as c:
        return c.request(method, path, **kw)


def run(gw: UiGateway, coro: Any) -> Any:
    assert gw._loop is not None
    return asyncio.run_coroutine_threadsafe(coro, gw._loop).result(10)


def beat(gw: UiGateway, token: str, state: str) -> None:
    assert call(gw, token, "POST", "/api/heartbeat", json={"state": state, "doing": ""}).status_code == 204


def make_swarm(gw: OverviewGateway, tmp: Path) -> Swarm:
    op = gw.operator_token
    dev1 = gw.add_principal("dev-1")
    waiting = open_demo_pr(gw, tmp, dev1)
    jobs = seed_jobs(gw, tmp, {"dev-1": dev1})
    tokens = jobs.tokens
    # A second PR (the jobs' branch), merged by the gate on an agent's approval.
    policy = {"required_approvals": 1, "human_approvals": 0, "required_checks": []}
    assert call(gw, op, "PUT", "/api/forge/repos/kswarm/kernels/policy", json=policy).status_code == 200
    with httpx.Client(base_url=f"{gw.url}/api/v1", headers={"Authorization": f"token {dev1}"}) as api:
        body = {"head": "dev-1/jobs", "base": "main", "title": "add and softmax"}
        reply = api.post("/repos/kswarm/kernels/pulls", json=body)
    assert reply.status_code == 201, reply.text
    merged = reply.json()["number"]
    head = call(gw, op, "GET", f"/api/forge/repos/kswarm/kernels/pulls/{merged}").json()["head_sha"]
    review = {"event": "APPROVED", "head_sha": head}
    path = f"/api/forge/repos/kswarm/kernels/pulls/{merged}/reviews"
    assert call(gw, tokens["reviewer"], "POST", path, json=review).status_code == 201
    # Tasks: one open, one claimed, one done.
    for task in ("t-open", "t-claimed", "t-done"):
        spec = {"id": task, "title": task, "description": "a kernel", "repo": "kswarm/kernels"}
        assert call(gw, op, "POST", "/api/tasks", json=spec).status_code == 201
    assert call(gw, tokens["dev-1"], "POST", "/api/tasks/t-claimed/claim").status_code == 200
    assert call(gw, tokens["dev-2"], "POST", "/api/tasks/t-done/claim").status_code == 200
    done = call(gw, op, "POST", "/api/tasks/t-done/done", json={"result": "merged"})  # an operator may
    assert done.status_code == 200, done.text
    # Agents: dev-1 working, dev-2 idle, dev-3 last beat two minutes ago (stalled), reviewer never beat.
    beat(gw, tokens["dev-1"], "working")
    beat(gw, tokens["dev-2"], "idle")
    gw.add_principal("dev-3")
    old = {"ts": repr(time.time() - 120), "state": "working", "doing": ""}
    run(gw, gw.app.state.ctx.redis.hset(gateway_keys.heartbeat("dev-3"), mapping=old))
    # Spending, booked as the proxy books every call (the swarm's daily budget is $5).
    store = gw.app.state.ctx.services.get(LLM_USAGE)
    run(gw, store.record("dev-1", "claude-sonnet-4-5", Usage(input_tokens=12_000, output_tokens=3_000)))
    return Swarm(jobs=jobs, waiting_pr=waiting, merged_pr=merged)


def overview(gw: UiGateway) -> dict[str, Any]:
    reply = call(gw, gw.operator_token, "GET", "/api/monitor/overview")
    assert reply.status_code == 200, reply.text
    return reply.json()


def figures(data: dict[str, Any], path: str = "") -> dict[str, dict[str, Any]]:
    """Every figure of the overview by its path (``tasks.open``, ``pools.0.running``)."""
    out: dict[str, dict[str, Any]] = {}
    if isinstance(data, dict) and set(data) == {"value", "link"}:
        return {path: data}
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else []
    for key, value in items:
        if key != "attention":
            out |= figures(value, f"{path}.{key}" if path else str(key))
    return out


def jobs_of(gw: UiGateway, **params: Any) -> list[dict[str, Any]]:
    reply = call(gw, gw.operator_token, "GET", "/api/jobs", params={"limit": 500, **params})
    assert reply.status_code == 200, reply.text
    return reply.json()
