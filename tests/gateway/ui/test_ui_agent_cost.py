"""An agent's page answers "what did it cost in the last ten minutes" from its timeline too: model calls
that never went through the LLM proxy (the demo's scripted policy, an agent's own key) are booked
nowhere else, and the page says so instead of showing $0 beside a timeline full of priced calls."""

from __future__ import annotations

import html
import re
import time

from monitor_ui_kit import MonitorUiGateway
from redis import Redis

from gateway.monitor import keys
from kstest.waiting import wait_for


def model_call(tokens_in: int, tokens_out: int) -> dict:
    usage = {"input_tokens": tokens_in, "output_tokens": tokens_out}
    data = {"model": "claude-sonnet-4-5", "usage": usage, "stop_reason": "end_turn", "latency_s": 0.1}
    return {"kind": "model", "ts": time.time(), "summary": f"{tokens_in} in / {tokens_out} out", "data": data}


def test_the_agent_page_sums_its_timelines_model_calls(mon_ui: MonitorUiGateway) -> None:
    dev = mon_ui.add_principal("dev-7")
    calls = [model_call(12_000, 20), model_call(11_900, 50), model_call(400, 3)]
    with mon_ui.client(dev) as agent:
        assert agent.post("/api/timeline", json={"entries": calls}).status_code == 200
        tool = {"kind": "tool_call", "ts": time.time(), "summary": "bash(ls)", "data": {"name": "bash"}}
        assert agent.post("/api/timeline", json={"entries": [tool]}).status_code == 200
    with mon_ui.client(mon_ui.operator_token) as op:
        stored = op.get("/api/agents/dev-7/timeline", params={"kind": "model"}).json()["entries"]
    priced = sum(e["cost_usd"] for e in stored)
    assert len(stored) == 3 and priced > 0, stored
    with mon_ui.login() as browser:
        page = browser.get("/ui/agents/dev-7", headers={"Accept": "text/html"}).text
    match = re.search(r'<td id="agent-reported">(.*?)</td>', page, re.S)
    assert match, "no reported-cost row"
    row = html.unescape(re.sub(r"<[^>]+>", "", match.group(1)))
    assert row.startswith(f"3 model calls · {24_373:,} tokens · ") and "booked nowhere else" in row, row
    assert f"${priced:.4f}" in row, (row, priced)
    # Another agent's page has no such row (its timeline is empty).
    mon_ui.add_principal("dev-8")
    with mon_ui.login() as browser:
        assert 'id="agent-reported"' not in browser.get("/ui/agents/dev-8").text


def wake(summary: str) -> dict:
    return {"kind": "wake", "ts": time.time(), "summary": summary, "data": {}}


def scripted_call(tokens_in: int, tokens_out: int) -> dict:
    usage = {"input_tokens": tokens_in, "output_tokens": tokens_out}
    data = {"model": "scripted", "usage": usage}
    return {"kind": "model", "ts": time.time(), "summary": "scripted", "data": data}


def wakes_html(page: str) -> str:
    match = re.search(r'<table class="grid" id="agent-cost-wakes">.*?<tbody>(.*?)</tbody>', page, re.S)
    assert match, page[:2000]
    return match.group(1)


def cell_text(page: str, pattern: str) -> str:
    match = re.search(pattern, page, re.S)
    assert match, (pattern, page[:2000])
    return html.unescape(re.sub(r"<[^>]+>", " ", match.group(1)))


def test_the_agent_page_shows_cost_per_task_and_per_wake_labelled_as_estimates(
    mon_ui: MonitorUiGateway,
) -> None:
    """A scripted agent's calls are priced at the table's default rate: each cost says it is an estimate
    and the page names the rate used; the calls made while holding a claim are that task's."""
    dev = mon_ui.add_principal("dev-9")
    redis = Redis.from_url(mon_ui.redis_url, decode_responses=True)
    with mon_ui.client(mon_ui.operator_token) as op:
        assert op.post("/api/tasks", json={"id": "softmax", "title": "Softmax"}).status_code == 201
    with mon_ui.client(dev) as agent:
        assert agent.post(
            "/api/timeline", json={"entries": [wake("inbox: 1 DM"), scripted_call(100, 10)]}
        ).is_success
        assert agent.post("/api/tasks/softmax/claim").status_code == 200
        wait_for(lambda: redis.hlen(keys.CLAIMS_OPEN) == 1, what="the claim window opened")
        calls = [wake("task softmax"), scripted_call(1_000, 200), scripted_call(2_000, 300)]
        assert agent.post("/api/timeline", json={"entries": calls}).is_success
    with mon_ui.client(mon_ui.operator_token) as op:
        stored = op.get("/api/agents/dev-9/timeline", params={"kind": "model"}).json()["entries"]
    assert all(
        e["cost_estimate"] and e["rate"] == {"input_per_mtok": 3.0, "output_per_mtok": 15.0} for e in stored
    )
    softmax_usd = sum(e["cost_usd"] for e in stored if e["data"]["usage"]["input_tokens"] >= 1_000)
    with mon_ui.login() as browser:
        page = browser.get("/ui/agents/dev-9").text
    row = cell_text(page, r'<tr data-task="softmax">(.*?)</tr>')
    assert (
        "2 calls" in row and f"{3_500:,} tokens" in row and f"${softmax_usd:.4f}" in row and "estimate" in row
    ), row
    assert "1 call " in cell_text(page, r'<tr data-task="-">(.*?)</tr>')
    wakes = cell_text(page, r'<table class="grid" id="agent-cost-wakes">(.*?)</table>')
    assert wakes.index("task softmax") < wakes.index("inbox: 1 DM"), "newest wake first"
    rows = re.findall(r"<tr>(.*?)</tr>", wakes_html(page), re.S)
    cells = [" ".join(html.unescape(re.sub(r"<[^>]+>", " ", r)).split()) for r in rows]
    assert len(cells) == 2, cells
    assert "task softmax 2 · 3,500 tokens" in cells[0] and "estimate" in cells[0], cells
    assert "inbox: 1 DM 1 · 110 tokens" in cells[1] and "estimate" in cells[1], cells
    rates = cell_text(page, r'<p class="muted" id="agent-cost-rates">(.*?)</p>')
    assert "scripted $3.0 in / $15.0 out per MTok" in " ".join(rates.split()), rates
