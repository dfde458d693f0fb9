"""The Dataset panel over a dataset written by the build's own writer: per task its accepted kernels with
author, reviewers, pool, speedup, cost, links to the kernel at its commit and to its job, lineage; pass
rates per task and pool; cost per accepted kernel; the files to download (operators only)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
from dataset_kit import row, write_built_dataset
from ui_kit import UiGateway, browser_page, shot

HTML = {"Accept": "text/html"}


def seed(gw: UiGateway) -> None:
    now = time.time()
    rows = [
        row("j00000000000a01", "softmax", "dev-1", "fail", False, now - 300),
        row(
            "j00000000000a02", "softmax", "dev-1", "pass", True, now - 200, refines="j00000000000a01",
            reviewers=["dev-2"], approvers=["dev-2"], speedup=1.8, pr_number=4, cost_tokens=1200,
            cost_usd=0.25, author_model="claude-x",
        ),
        row("j00000000000b01", "add", "dev-2", "pass", False, now - 100),
    ]  # fmt: skip
    lines = [
        {"task": "softmax", "agent": "dev-1", "model": "claude-x", "tokens": 1200, "cost_usd": 0.25},
        {"task": "-", "agent": "dev-2", "model": "claude-x", "tokens": 100, "cost_usd": 0.01},
    ]
    write_built_dataset(gw.home, rows, {"lines": lines})


def test_the_dataset_panel_shows_accepted_kernels_cost_and_lineage(ui_gateway: UiGateway) -> None:
    seed(ui_gateway)
    with ui_gateway.login() as browser:
        page = browser.get("/ui/dataset", headers=HTML)
        assert page.status_code == 200, page.text
        html = page.text
        assert 'id="unavailable"' not in html and 'id="no-dataset"' not in html
        # Per task: only the accepted record, with its facts and links.
        accepted = re.findall(r'<tr data-record="([^"]+)"', html)
        assert accepted == ["j00000000000a02"]
        assert 'href="/ui/jobs/j00000000000a02"' in html and 'href="/ui/prs/kswarm/dataset/4"' in html
        assert "/ui/commit/kswarm/dataset/" in html and "kernels/softmax/dev-1.py" in html
        assert "1.80×" in html and "dev-2" in html and "claude-x" in html
        assert 'href="/ui/jobs/j00000000000a01"' in html, "lineage: the failed attempt it refines"
        assert 'id="usd-per-kernel"' in html and "$0.25" in html
        assert 'id="by-task"' in html and 'id="by-pool"' in html
        # Downloads: the build's own files.
        jsonl = browser.get("/ui/dataset/files/records.jsonl")
        assert jsonl.status_code == 200 and len(jsonl.text.splitlines()) == 3
        assert browser.get("/ui/dataset/files/records.parquet").content[:4] == b"PAR1"
        assert browser.get("/ui/dataset/files/../../operator.token").status_code == 404
        assert browser.get("/ui/dataset/files/secrets.json").status_code == 404
    # Not for agents, nor for nobody.
    agent = ui_gateway.add_principal("dev-1")
    with httpx.Client(base_url=ui_gateway.url, headers={"Authorization": f"Bearer {agent}"}) as c:
        assert c.get("/ui/dataset/files/records.jsonl").status_code == 403
    assert httpx.get(f"{ui_gateway.url}/ui/dataset/files/records.jsonl").status_code == 401


def test_dataset_panel_screenshot(ui_gateway: UiGateway, chromium: Path) -> None:
    seed(ui_gateway)
    with browser_page(ui_gateway) as page:
        page.goto(f"{ui_gateway.url}/ui/dataset")
        page.wait_for_selector('tr[data-record="j00000000000a02"]')
        shot(page, "dataset-built", full_page=True)
