"""The overview in a real browser (Playwright + Debian Chromium): the landing page shows the API's figures
with Attention on top, follows a job finishing without a reload, each figure opens its list, the charts
have titles, units and a window that fits a young swarm; a screenshot for docs/ui.md."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from jobs_kit import finish_running
from overview_kit import OverviewGateway, figures, make_swarm, overview
from playwright.sync_api import expect
from ui_kit import browser_page, shot

from kstest.waiting import wait_for


@pytest.fixture
def ov_ui(clean_redis: str, short_tmp: Path) -> Iterator[OverviewGateway]:
    gw = OverviewGateway(short_tmp / "home", clean_redis)
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


def test_the_landing_page_is_the_overview_of_the_swarm(
    ov_ui: OverviewGateway, chromium: Path, short_tmp: Path
) -> None:
    swarm = make_swarm(ov_ui, short_tmp)
    wait_for(lambda: overview(ov_ui)["prs"]["merged"]["value"] == 1, timeout=60, what="the gate merges")
    with browser_page(ov_ui) as page:
        assert page.url.endswith("/ui/overview")
        expect(page.locator("#nav-overview")).to_have_class("active")
        api = figures(overview(ov_ui))
        shown = page.locator("[data-figure]")
        paths = shown.evaluate_all("els => els.map(e => e.dataset.figure)")
        assert sorted(paths) == sorted(api)
        for path, fig in api.items():
            if path == "spend.last_hour_usd":
                continue  # the monitor's sample may land between the page and this read
            one = page.locator(f'[data-figure="{path}"]')
            assert float(one.get_attribute("data-value") or "nan") == fig["value"], path
            assert one.get_attribute("href") == fig["link"], path
        assert page.locator('[data-figure="pools.1.running"] .ov-num').inner_text() == "1"
        assert page.locator('[data-figure="agents.stalled"] .ov-num').inner_text() == "1"
        assert "today, of $5.00/day" in page.locator('[data-figure="spend.today_usd"]').inner_text()
        # Attention on top: the stalled agent and the pool nobody serves, above the figures.
        attention = page.locator("#attention-list")
        expect(attention.locator('li.att[data-key="agent:dev-3"]')).to_have_count(1)
        expect(attention.locator('li.att[data-key="pool:npu-910c"]')).to_have_count(1)
        top = attention.bounding_box()
        grid = page.locator(".ov-grid").bounding_box()
        assert top and grid and top["y"] < grid["y"]
        # Charts: a visible title, what the axis counts, and the swarm's lifetime as the window.
        queue = page.locator("#chart-queue svg")
        expect(queue.locator("text.chart-title")).to_have_text("Jobs queued and running per pool")
        expect(queue.locator("text.chart-axis")).to_have_text("jobs (sampled)")
        expect(queue.locator("text.chart-window")).to_contain_text("since the swarm started")
        running = queue.locator('g.series[data-series="running:gpu-h100"] circle').last
        assert running.get_attribute("data-value") == "1"  # the chart agrees with the figure
        expect(page.locator("#chart-throughput svg text.chart-title")).to_contain_text("Kernels accepted")
        page.evaluate("window.__sameDocument = true")
        shot(page, "overview", full_page=True)
        # The running job finishes: the figure and the chart follow without a reload.
        finish_running(ov_ui, swarm.jobs)
        expect(page.locator('[data-figure="pools.1.running"] .ov-num')).to_have_text("0", timeout=15_000)
        expect(running).to_have_attribute("data-value", "0")
        assert page.evaluate("window.__sameDocument") is True, "updated in place, not reloaded"
        # Each figure opens its list: the queued job on npu-910c, the task board.
        page.locator('[data-figure="pools.2.queued"]').click()
        page.wait_for_url("**/ui/jobs?pool=npu-910c")
        expect(page.locator(f'a[href="/ui/jobs/{swarm.jobs.queued}"]').first).to_be_visible()
        page.go_back()
        page.locator('[data-figure="prs.merged"]').click()
        page.wait_for_url("**/ui/prs?state=closed")
        expect(page.locator("main")).to_contain_text("add and softmax")
        page.go_back()
        page.locator('[data-figure="tasks.claimed"]').click()
        page.wait_for_url("**/ui/tasks?state=claimed")
        expect(page.locator('#tasks-table tr[data-task="t-claimed"]')).to_have_count(1)
        expect(page.locator("#tasks-table tbody tr[data-task]")).to_have_count(1)  # the claimed one only
