"""An agent's page answers "what did it cost in the last ten minutes" from its timeline too: model calls
that never went through the LLM proxy (the demo's scripted policy, an agent's own key) are booked
nowhere else, and the page says so instead of showing $0 beside a timeline full of priced calls."""

from __future__ import annotations

import html
import re
import time

from monitor_ui_kit import MonitorUiGateway


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
