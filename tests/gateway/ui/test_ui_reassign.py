"""Reassign a task from the Tasks panel: the operator's forced release of the holder's claim, then a DM
asking the new agent to claim it (a claim is always the claimant's own act), audited and announced.

Attacks: the holder's own agent token (and the beneficiary's) on the REST action and on the UI's bridge,
a logged-in session without its CSRF token or with a forged one, a cross-site form; a target that is no
agent (a worker, the operator, a name that is none). Each refused with nothing changed."""

from __future__ import annotations

import html
import re
from pathlib import Path

import httpx
from monitor_ui_kit import MonitorUiGateway
from playwright.sync_api import expect
from ui_kit import browser_page

from gateway.chat import dm_channel
from kstest.waiting import wait_for

REASSIGN = "/api/actions/tasks/softmax/reassign"


def task(gw: MonitorUiGateway) -> dict:
    with gw.client(gw.operator_token) as op:
        reply = op.get("/api/tasks/softmax")
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def audited(gw: MonitorUiGateway) -> list[tuple[str, str, str, str]]:
    with gw.client(gw.operator_token) as op:
        records = op.get("/api/monitor/actions").json()
    return [(r["action"], r["target"], r["detail"], r["outcome"]) for r in records]


def dm_texts(gw: MonitorUiGateway, token: str, me: str, peer: str) -> list[str]:
    """The DMs between ``me`` and ``peer``, read as ``me`` (the pair's channel; empty until the first)."""
    with gw.client(token) as c:
        reply = c.get(f"/api/channels/{dm_channel(me, peer)}/messages")
    if reply.status_code == 404:
        return []
    assert reply.status_code == 200, reply.text
    return [m["text"] for m in reply.json()["messages"]]


def held_by_dev1(gw: MonitorUiGateway) -> None:
    current = task(gw)
    assert (current["state"], current["holder"]) == ("claimed", "dev-1"), current


def test_reassign_attacks_change_nothing(mon_ui: MonitorUiGateway) -> None:
    dev1, dev2 = mon_ui.add_principal("dev-1"), mon_ui.add_principal("dev-2")
    mon_ui.add_principal("w-cpu", "worker")
    with mon_ui.client(mon_ui.operator_token) as op:
        assert op.post("/api/tasks", json={"id": "softmax", "title": "Softmax"}).status_code == 201
    with mon_ui.client(dev1) as agent:
        assert agent.post("/api/tasks/softmax/claim").status_code == 200
    # Agents' tokens: dev-2 would take dev-1's task, dev-1 would hand its task to a friend.
    for token in (dev2, dev1):
        with mon_ui.client(token) as agent:
            assert agent.post(REASSIGN, json={"agent": "dev-2"}).status_code == 403
        with httpx.Client(base_url=mon_ui.url, timeout=30) as raw:
            bridged = raw.post(
                f"/ui{REASSIGN}",
                json={"agent": "dev-2"},
                headers={"Authorization": f"Bearer {token}", "X-CSRF-Token": "x"},
            )
            assert bridged.status_code in (401, 403), bridged.text
    held_by_dev1(mon_ui)
    with mon_ui.login() as browser:
        for headers in ({}, {"X-CSRF-Token": "forged"}):
            reply = browser.post(f"/ui{REASSIGN}", json={"agent": "dev-2"}, headers=headers)
            assert reply.status_code == 403, reply.text
        assert browser.post(f"/ui{REASSIGN}", data={"agent": "dev-2"}).status_code == 403  # cross-site form
        held_by_dev1(mon_ui)
        assert audited(mon_ui) == []
        # Not an agent: refused with a clear reason, the claim kept.
        csrf = {"X-CSRF-Token": browser.csrf}
        for target in ("w-cpu", "operator", "nobody-here"):
            reply = browser.post(f"/ui{REASSIGN}", json={"agent": target}, headers=csrf)
            assert reply.status_code == 422 and "is not an agent" in reply.text, reply.text
        reply = browser.post(f"/ui{REASSIGN}", json={"agent": "../dev-2"}, headers=csrf)
        assert reply.status_code == 422, reply.text
    held_by_dev1(mon_ui)
    assert dm_texts(mon_ui, dev2, "dev-2", "operator") == []


def test_reassign_from_the_tasks_panel(mon_ui: MonitorUiGateway, chromium: Path) -> None:
    dev1, dev2 = mon_ui.add_principal("dev-1"), mon_ui.add_principal("dev-2")
    with mon_ui.client(mon_ui.operator_token) as op:
        assert op.post("/api/tasks", json={"id": "softmax", "title": "Softmax"}).status_code == 201
    with mon_ui.client(dev1) as agent:
        assert agent.post("/api/tasks/softmax/claim").status_code == 200
    with browser_page(mon_ui) as page:
        page.goto(f"{mon_ui.url}/ui/tasks")
        row = page.locator('#tasks-table tr[data-task="softmax"]')
        expect(row.locator("td").nth(2)).to_contain_text("dev-1")
        row.locator("select[name=agent]").select_option("dev-2")
        row.locator("button:text('Reassign')").click()
        page.wait_for_selector("body[data-last-action]", timeout=30_000)
        said = "operator reassigned task softmax to dev-2 (released from dev-1)"
        expect(page.locator("#toast")).to_contain_text(said)
        expect(page.locator('#tasks-table tr[data-task="softmax"] .st')).to_have_text("open", timeout=10_000)
    assert task(mon_ui)["state"] == "open"
    # dev-2 is asked in a DM, and claims it itself.
    [ask] = dm_texts(mon_ui, dev2, "dev-2", "operator")
    assert "Please take task `softmax` (Softmax): task_claim it." in ask and "released from dev-1" in ask
    with mon_ui.client(dev2) as agent:
        assert agent.post("/api/tasks/softmax/claim").status_code == 200
    assert task(mon_ui)["holder"] == "dev-2"
    assert audited(mon_ui) == [("task:reassign", "softmax", "dev-2", "done")]

    # Announced in #ops, @mentioning the agent that lost the claim, so it finds it in its inbox.
    def announced() -> list[str]:
        with mon_ui.client(dev1) as agent:
            texts = [m["text"] for m in agent.get("/api/channels/ops/messages").json()["messages"]]
        return [t for t in texts if "reassigned task softmax" in t]

    [line] = wait_for(announced, what="the #ops announcement")
    assert line.startswith("@dev-1 operator reassigned task softmax to dev-2")

    # The Tasks page says it was reassigned: on the board, in its own table, on the claim window it ended.
    def released() -> list[dict]:
        with mon_ui.client(mon_ui.operator_token) as op:
            windows = op.get("/api/monitor/claims", params={"task": "softmax"}).json()
        # closed by the forced release, or seen closed only once dev-2 had claimed ("taken")
        return [w for w in windows if w["agent"] == "dev-1" and w["how"] in ("released", "taken")]

    wait_for(released, what="dev-1's claim window closed")
    with mon_ui.login() as browser:
        page = browser.get("/ui/tasks").text
    moves = text_of(page, r'<table class="grid" id="reassign-table">.*?<tbody>(.*?)</tbody>')
    assert moves.split()[-4:] == ["softmax", "dev-1", "dev-2", "operator"], moves
    board = text_of(page, r'<tr data-task="softmax" class="task-claimed">(.*?)</tr>')
    assert "reassigned from dev-1 to dev-2 by operator" in board, board
    history = text_of(page, r'<table class="grid" id="claims-table">(.*?)</table>')
    assert "reassigned to dev-2" in history, history


def text_of(page: str, pattern: str) -> str:
    match = re.search(pattern, page, re.S)
    assert match, pattern
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", match.group(1))).split())
