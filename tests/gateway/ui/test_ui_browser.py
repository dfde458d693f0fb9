"""The UI in a real browser (Playwright driving Debian's Chromium): live chat, the composer, refusals.

Screenshots of every panel land in test-artifacts/ui/.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from jobs_kit import JobsUiGateway, finish_running, seed_jobs
from playwright.sync_api import expect
from ui_kit import UiGateway, browser_page, shot


def post(gw: UiGateway, token: str, channel: str, text: str, **extra: str) -> dict:
    with gw.client(token) as client:
        reply = client.post(f"/api/channels/{channel}/messages", json={"text": text, **extra})
    assert reply.status_code == 201, reply.text
    return reply.json()


def test_an_api_message_appears_on_the_open_page_within_a_second(
    ui_gateway: UiGateway, chromium: Path
) -> None:
    dev = ui_gateway.add_principal("dev-1")
    reviewer = ui_gateway.add_principal("reviewer")
    post(ui_gateway, dev, "general", "morning: I take the softmax kernel, @reviewer please watch #3")
    post(ui_gateway, reviewer, "general", "ok @dev-1, ping me when verify is green")
    with browser_page(ui_gateway) as page:
        page.goto(f"{ui_gateway.url}/ui/chat?c=general")
        page.wait_for_selector("body[data-live=open]", timeout=10_000)
        page.evaluate("window.__sameDocument = true")
        text = f"live check {time.time_ns()} <b>not bold</b> @operator"
        started = time.monotonic()
        post(ui_gateway, dev, "general", text)
        page.wait_for_selector('article.msg:has-text("live check")', timeout=1_000)
        elapsed = time.monotonic() - started
        assert elapsed < 1.0, f"took {elapsed:.2f}s"
        assert page.evaluate("window.__sameDocument") is True, "the page was reloaded"
        last = page.locator("article.msg").last
        assert "<b>not bold</b>" in last.inner_text(), "agent text is shown, not interpreted"
        assert last.locator(".mention-me").inner_text() == "@operator"
        # A message in another channel lights up that channel's badge instead.
        post(ui_gateway, dev, "ops", "disk at 80%")
        page.wait_for_selector('a.chan[data-chan="ops"] .badge:text("1")', timeout=2_000)
        shot(page, "chat")


def test_composer_message_reaches_the_mentioned_agents_inbox(ui_gateway: UiGateway, chromium: Path) -> None:
    dev1 = ui_gateway.add_principal("dev-1")
    dev2 = ui_gateway.add_principal("dev-2")
    root = post(ui_gateway, dev2, "general", "which tile size for the fp16 matmul?")
    with browser_page(ui_gateway) as page:
        page.goto(f"{ui_gateway.url}/ui/chat?c=general")
        page.wait_for_selector("body[data-live=open]", timeout=10_000)
        page.click("#composer-text")
        page.keyboard.type("@dev-")
        page.wait_for_selector("ul.complete li", timeout=2_000)
        page.keyboard.type("1")
        page.keyboard.press("Tab")  # completes "@dev-1 "
        page.keyboard.type("please answer dev-2 in the thread")
        page.keyboard.press("Enter")
        page.wait_for_selector('article.msg:has-text("please answer dev-2")', timeout=3_000)
        with ui_gateway.client(dev1) as agent:
            items = agent.get("/api/inbox", params={"wait": 5}).json()["items"]
        assert [(i["reason"], i["sender"], i["text"]) for i in items] == [
            ("mention", "operator", "@dev-1 please answer dev-2 in the thread")
        ]
        # A thread: open it, reply in it; the root's author gets a reply notice.
        page.click(f"#m-{root['id']} .reply")
        page.wait_for_selector(".thread textarea", timeout=3_000)
        page.fill(".thread textarea", "128x64 worked best for me")
        page.keyboard.press("Enter")
        page.wait_for_selector('#thread-messages article:has-text("128x64")', timeout=3_000)
        page.wait_for_selector(f'#m-{root["id"]} .reply .count:text("1")', timeout=3_000)
        with ui_gateway.client(dev2) as agent:
            reasons = [i["reason"] for i in agent.get("/api/inbox").json()["items"]]
        assert reasons == ["reply"]
        shot(page, "chat-thread")


def test_scroll_back_and_search(scan_ui: UiGateway, chromium: Path) -> None:
    ui_gateway = scan_ui  # no search index: the search is the chat's substring scan of recent history
    dev = ui_gateway.add_principal("dev-1")
    with ui_gateway.client(ui_gateway.operator_token) as op:
        for i in range(35):
            op.post("/api/channels/reviews/messages", json={"text": f"review note {i}"})
    with ui_gateway.client(dev) as agent:
        for i in range(35, 70):
            agent.post("/api/channels/reviews/messages", json={"text": f"review note {i}"})
    with browser_page(ui_gateway) as page:
        page.goto(f"{ui_gateway.url}/ui/chat?c=reviews")
        assert page.locator("#messages article.msg").count() == 50
        page.evaluate("document.getElementById('messages').scrollTop = 0")
        expect(page.locator("#messages article.msg")).to_have_count(70, timeout=5_000)
        assert page.locator("#older").is_hidden()
        assert "review note 0" in page.locator("#messages article.msg").first.inner_text()
        page.fill(".sidebar .search input", "note 6")
        page.keyboard.press("Enter")
        page.wait_for_url("**/ui/chat/search?q=note+6")
        assert page.locator(".hits li.hit").count() == 11  # 6, 60..69 (recent-history scan: no index)
        expect(page.locator("#search-count")).to_contain_text("recent history only")
        shot(page, "search")


def test_an_agent_token_is_refused_in_the_browser(ui_gateway: UiGateway, chromium: Path) -> None:
    agent = ui_gateway.add_principal("dev-1")
    with browser_page(ui_gateway, login=False) as page:
        page.goto(f"{ui_gateway.url}/ui/chat")
        assert page.url.endswith("/ui/login?next=/ui/chat")
        shot(page, "login")
        page.fill("#token", agent)
        page.click("button[type=submit]")
        assert "agents may not open the operator UI" in page.locator("#login-error").inner_text()
        assert not any(c["name"] == "ks_ui_session" for c in page.context.cookies())
        page.context.set_extra_http_headers({"Authorization": f"Bearer {agent}"})
        reply = page.goto(f"{ui_gateway.url}/ui/agents")
        assert reply is not None and reply.status == 403
        assert "may not open the operator UI" in page.content()


def test_login_link_with_the_token_in_the_fragment(ui_gateway: UiGateway, chromium: Path) -> None:
    with browser_page(ui_gateway, login=False) as page:
        page.goto(f"{ui_gateway.url}/ui/login#token={ui_gateway.operator_token}")
        page.wait_for_url("**/ui/overview")
        assert ui_gateway.operator_token not in page.url
        page.wait_for_selector("body[data-live=open]", timeout=10_000)


def test_every_panel_renders(jobs_ui: JobsUiGateway, chromium: Path, short_tmp: Path) -> None:
    """Screenshots of the Agents, Jobs (real jobs: a flagged result, a pass, a running reproduction of a
    PR, a queued job), PRs (a real PR of the embedded forge) and Dataset panels, and of one job's page."""
    from git_kit import open_demo_pr

    gw = jobs_ui
    dev = gw.add_principal("dev-1")
    with gw.client(dev) as agent:
        agent.post("/api/heartbeat", json={"state": "working", "doing": "benchmarking softmax v2"})
    number = open_demo_pr(gw, short_tmp, dev)
    jobs = seed_jobs(gw, short_tmp, tokens={"dev-1": dev}, pr=number)
    post(gw, dev, "general", f"opened kswarm/kernels#{number}, @operator can you look?")
    with gw.client(dev) as agent:
        agent.post("/api/dms/operator/messages", json={"text": "verify is flaky on the cpu pool"})
    with browser_page(gw) as page:
        page.goto(f"{gw.url}/ui/chat")
        page.wait_for_selector("#messages.feed article.msg")
        shot(page, "chat-all")
        for panel in ("agents", "jobs", "dataset", "prs"):
            page.goto(f"{gw.url}/ui/{panel}")
            page.wait_for_selector("section#panel")
            shot(page, panel, full_page=panel == "jobs")
        assert page.locator("#prs-table tbody tr").count() == 1
        page.click(f'a:text("kswarm/kernels#{number}")')
        page.wait_for_selector("#pr-diff .new-file table.sd-code")  # a new kernel: its code
        shot(page, "pr")
        page.goto(f"{gw.url}/ui/dataset")
        assert page.locator("#unavailable").count() == 0 and "no dataset built yet" in page.content()
        # Jobs: real rows, badges, devices, and the link from a result to its log.
        page.goto(f"{gw.url}/ui/jobs")
        assert page.locator("#unavailable").count() == 0, "the job runner is registered"
        expect(page.locator("#running-table tbody tr[data-job]")).to_have_count(2)
        reproduction = page.locator(f'#running-table tr[data-job="{jobs.reproduction}"]')
        expect(reproduction.locator(".pr-link")).to_have_text(f"reproduces #{number}")
        expect(page.locator('#pools-table tr[data-pool="gpu-h100"] .dev.busy')).to_have_count(6)
        flagged = page.locator(f'#finished-table tr[data-job="{jobs.flagged}"]')
        expect(flagged.locator(".flag")).to_have_text(["mismatch", "unwritten_output"])
        assert flagged.locator(".flag").first.is_visible()
        # Live: the running job finishes and moves to the results without a reload.
        page.evaluate("window.__sameDocument = true")
        finish_running(gw, jobs)
        row = page.locator(f'#finished-table tr[data-job="{jobs.running}"]')
        expect(row.locator(".verdict")).to_have_text("pass", timeout=8_000)
        assert page.evaluate("window.__sameDocument") is True, "the page was reloaded"
        expect(page.locator("#running-table tbody tr[data-job]")).to_have_count(1)
        flagged.locator("a.log-link").click()
        page.wait_for_url(f"**/ui/jobs/{jobs.flagged}#log")
        log = page.locator("#job-log")
        assert '<script>alert("pwned")</script>' in log.inner_text(), "shown as text, not run"
        assert page.locator("#job-log script").count() == 0
        shot(page, "job")
        # A running job's page follows it until it is final, then stops refreshing.
        page.goto(f"{gw.url}/ui/jobs/{jobs.reproduction}")
        expect(page.locator("#job-state")).to_have_text("running")
        page.evaluate("window.__sameDocument = true")
        finish_running(gw, jobs, jobs.reproduction, log="reproduced: all 30 trials pass\n")
        expect(page.locator("#job-state")).to_have_text("succeeded", timeout=8_000)
        expect(page.locator("#job-log")).to_contain_text("reproduced: all 30 trials pass")
        assert page.evaluate("window.__sameDocument") is True, "the page was reloaded"
        assert page.locator("section#panel").get_attribute("data-refresh") is None
    assert httpx.get(f"{gw.url}/ui/static/ui.css").status_code == 200
