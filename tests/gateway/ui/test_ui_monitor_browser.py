"""The monitoring panels in a real browser (Playwright + Debian Chromium) on a gateway with the monitor,
the search index and the real job runner: Attention live, an agent's timeline live, cancel and requeue
from a job's page, a chart that reads back what was posted; a screenshot of each panel at 1400×900."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from jobs_kit import seed_jobs
from monitor_ui_kit import MonitorUiGateway
from playwright.sync_api import expect
from ui_kit import UiGateway, browser_page, shot

from kstest.waiting import wait_for


def beat(gw: UiGateway, token: str, doing: str = "") -> None:
    with gw.client(token) as c:
        assert c.post("/api/heartbeat", json={"state": "working", "doing": doing}).is_success


def report(gw: UiGateway, token: str, *entries: dict[str, Any]) -> None:
    with gw.client(token) as c:
        assert c.post("/api/timeline", json={"entries": list(entries)}).status_code == 200


def test_a_stalled_agent_comes_and_goes_on_attention_live(mon_ui: MonitorUiGateway, chromium: Path) -> None:
    dev = mon_ui.add_principal("dev-3")
    beat(mon_ui, dev)
    with browser_page(mon_ui) as page:
        page.goto(f"{mon_ui.url}/ui/attention")
        page.evaluate("window.__sameDocument = true")
        item = page.locator('#attention-list li.att[data-key="agent:dev-3"]')
        expect(item).to_have_count(1, timeout=15_000)  # stall_after_s is 3 s
        expect(item.locator(".att-title")).to_have_text("dev-3 is stalled")
        assert "no heartbeat for" in item.locator(".att-reason").inner_text()
        shot(page, "attention")
        beat(mon_ui, dev)  # it recovers
        expect(item).to_have_count(0, timeout=15_000)
        assert page.evaluate("window.__sameDocument") is True, "updated in place, not reloaded"


def test_a_tool_call_appears_on_the_timeline_without_reload(mon_ui: MonitorUiGateway, chromium: Path) -> None:
    dev = mon_ui.add_principal("dev-7")
    now = __import__("time").time()
    report(mon_ui, dev, {"kind": "wake", "ts": now, "summary": "woken by 1: DM from operator", "data": {}})
    with browser_page(mon_ui) as page:
        page.goto(f"{mon_ui.url}/ui/agents/dev-7")
        page.wait_for_selector("body[data-timeline=open]", timeout=10_000)
        page.evaluate("window.__sameDocument = true")
        call = {
            "kind": "tool_call",
            "ts": now + 1,
            "summary": "bash(git commit -m 'softmax: rowwise')",
            "call_id": "c1",
            "data": {"name": "bash", "input": {"command": "git commit -m 'softmax: rowwise' <b>x</b>"}},
        }
        report(mon_ui, dev, call)
        first = page.locator("#timeline article.tl").first
        expect(first).to_contain_text("git commit -m 'softmax: rowwise'", timeout=10_000)
        expect(page.locator("#agent-doing")).to_contain_text("running bash", timeout=10_000)
        assert page.locator("#timeline b").count() == 0, "arguments shown as text"
        assert page.evaluate("window.__sameDocument") is True
        shot(page, "agent-timeline")


def test_cancel_and_requeue_from_a_jobs_page(
    mon_ui: MonitorUiGateway, chromium: Path, short_tmp: Path
) -> None:
    jobs = seed_jobs(mon_ui, short_tmp)
    with browser_page(mon_ui) as page:
        page.on("dialog", lambda d: d.accept())
        page.goto(f"{mon_ui.url}/ui/jobs/{jobs.queued}")
        page.click("#job-cancel")
        expect(page.locator("#job-state")).to_have_text("cancelled", timeout=10_000)
        page.goto(f"{mon_ui.url}/ui/jobs/{jobs.passed}")
        page.click("#job-requeue")
        page.wait_for_url(lambda url: re.search(r"/ui/jobs/j[0-9a-f]+$", url) and jobs.passed not in url)
        new = page.url.rsplit("/", 1)[1]
        assert new != jobs.passed
        expect(page.locator("#job-state")).to_have_text("queued")
        shot(page, "job-requeued")
    with mon_ui.client(mon_ui.operator_token) as op:
        assert op.get(f"/api/jobs/{jobs.queued}").json()["state"] == "cancelled"
        old, again = op.get(f"/api/jobs/{jobs.passed}").json(), op.get(f"/api/jobs/{new}").json()
        assert (again["kernel"], again["sha"], again["pool"]) == (old["kernel"], old["sha"], old["pool"])
        actions = [(a["action"], a["target"]) for a in op.get("/api/monitor/actions").json()]
    assert ("job:cancel", jobs.queued) in actions and ("job:requeue", jobs.passed) in actions


def test_a_chart_reads_back_what_was_posted(mon_ui: MonitorUiGateway, chromium: Path) -> None:
    dev = mon_ui.add_principal("dev-1")
    with mon_ui.client(dev) as c:
        for i in range(7):
            assert c.post("/api/channels/general/messages", json={"text": f"note {i}"}).status_code == 201

    def counted() -> float:
        with mon_ui.client(mon_ui.operator_token) as op:
            lines = op.get("/api/monitor/charts/messages").json()
        return sum(p["value"] for s in lines if s["name"] == "chat" for p in s["points"])

    wait_for(lambda: counted() == 7, what="seven chat messages in the series")
    with browser_page(mon_ui) as page:
        page.goto(f"{mon_ui.url}/ui/charts")
        chat = page.locator('#chart-messages svg g.series[data-series="chat"]')
        expect(chat).to_have_attribute("data-total", "7")
        bars = chat.locator("rect[data-value]")
        assert sum(float(v) for v in bars.evaluate_all("els => els.map(e => e.dataset.value)")) == 7
        shot(page, "charts")
        for panel in ("tasks", "dataset", "agents"):
            page.goto(f"{mon_ui.url}/ui/{panel}")
            page.wait_for_selector("section#panel")
            shot(page, f"monitor-{panel}")
        page.goto(f"{mon_ui.url}/ui/chat/search?q=note")
        expect(page.locator(".hits li.hit")).to_have_count(7)
        assert page.locator(".hits li.hit mark").count() >= 7
        shot(page, "search-fts")


def test_an_operator_approves_from_the_pr_page_and_the_gate_box_says_merged(
    mon_ui: MonitorUiGateway, chromium: Path, short_tmp: Path
) -> None:
    from git_kit import open_demo_pr

    dev, bob = mon_ui.add_principal("dev-1"), mon_ui.add_principal("bob")
    number = open_demo_pr(mon_ui, short_tmp, dev)
    with mon_ui.client(mon_ui.operator_token) as op:
        policy = {"required_approvals": 1, "human_approvals": 1, "required_checks": []}
        assert op.put("/api/forge/repos/kswarm/kernels/policy", json=policy).status_code == 200
        head = op.get(f"/api/forge/repos/kswarm/kernels/pulls/{number}").json()["head_sha"]
    with mon_ui.client(bob) as c:
        body = {"event": "APPROVED", "head_sha": head}
        assert c.post(f"/api/forge/repos/kswarm/kernels/pulls/{number}/reviews", json=body).status_code == 201
    with browser_page(mon_ui) as page:
        page.goto(f"{mon_ui.url}/ui/prs/kswarm/kernels/{number}")
        expect(page.locator("#gate-reasons")).to_contain_text("human approval", timeout=10_000)
        shot(page, "pr-waiting-for-a-human")
        page.wait_for_selector("body[data-live=open]", timeout=30_000)  # the page's scripts are running
        # Before: what an approval by the operator counts for; after: the answer says it again.
        counts = "it counts toward the 1 human approval(s) the policy requires"
        expect(page.locator("#approval-counts")).to_contain_text(counts)
        page.fill("#review-form textarea[name=body]", "**ok** by me, see #1")
        page.click("#review-approve")
        page.wait_for_selector("body[data-last-action=done]", timeout=30_000)
        expect(page.locator("#toast")).to_contain_text(f"your approval is recorded: {counts}")

        def merged() -> bool:
            with mon_ui.client(mon_ui.operator_token) as op:
                return op.get(f"/api/forge/repos/kswarm/kernels/pulls/{number}").json()["state"] == "merged"

        wait_for(merged, timeout=60, what="the gate merges on the operator's approval")
        page.goto(f"{mon_ui.url}/ui/prs/kswarm/kernels/{number}")
        expect(page.locator("#gate-state")).to_have_text("merged")
        line = page.locator("#gate-line").inner_text()
        assert line.startswith("merged by the gate at head") and "not mergeable" not in line
        assert "already merged" not in page.locator("#gate-box").inner_text()
        expect(page.locator("#gate-box .human")).to_have_text("operator")
        shot(page, "pr-merged")


def test_post_and_release_a_task_from_the_tasks_panel(mon_ui: MonitorUiGateway, chromium: Path) -> None:
    dev = mon_ui.add_principal("dev-2")
    with browser_page(mon_ui) as page:
        page.on("dialog", lambda d: d.accept())
        page.goto(f"{mon_ui.url}/ui/tasks")
        page.fill("#post-task input[name=id]", "layernorm")
        page.fill("#post-task input[name=title]", "LayerNorm, fp16")
        page.fill("#post-task textarea[name=description]", "**fast** and exact to 1e-3")
        page.fill("#post-task input[name=labels]", "norm, fp16")
        page.click("#post-task button[type=submit]")
        expect(page.locator('#tasks-table tr[data-task="layernorm"]')).to_have_count(1, timeout=10_000)
        with mon_ui.client(dev) as c:
            assert c.post("/api/tasks/layernorm/claim").status_code == 200
        wait_for(
            lambda: page.reload() or page.locator('#claims-table td:text("dev-2")').count() == 1,
            what="the claim in the claims history",
        )
        row = page.locator('#tasks-table tr[data-task="layernorm"]')
        expect(row.locator("td").nth(2)).to_contain_text("dev-2")
        shot(page, "tasks")
        row.locator("button:text('Release')").click()
        expect(row.locator(".st")).to_have_text("open", timeout=10_000)
    with mon_ui.client(mon_ui.operator_token) as op:
        task = op.get("/api/tasks/layernorm").json()
        actions = [(a["action"], a["target"]) for a in op.get("/api/monitor/actions").json()]
    assert task["state"] == "open" and task["labels"] == ["norm", "fp16"] and task["posted_by"] == "operator"
    assert ("task:post", "layernorm") in actions and ("task:release", "layernorm") in actions
