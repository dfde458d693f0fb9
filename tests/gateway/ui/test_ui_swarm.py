"""The Agents panel on a real swarm: the orchestrator (process backend) supervising real agent processes."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import expect
from ui_kit import UiGateway, browser_page, running_swarm, shot

from kstest.waiting import wait_for
from orchestrator.supervisor.reconcile import load_record

AGENTS = "  - pattern: dev-{i}\n    count: 2\n"


def running(swarm, *names: str) -> bool:
    return all(load_record(swarm.layout, n, "process").state == "running" for n in names)


def test_the_restart_button_restarts_an_agent(ui_gateway: UiGateway, chromium: Path) -> None:
    with running_swarm(ui_gateway, AGENTS) as swarm:
        wait_for(lambda: running(swarm, "dev-1", "dev-2"), 60, "both agents running")
        before = load_record(swarm.layout, "dev-1", "process")
        with browser_page(ui_gateway) as page:
            page.goto(f"{ui_gateway.url}/ui/agents")
            row = page.locator('tr[data-agent="dev-1"]')
            expect(row.locator(".restarts")).to_have_text(str(before.restarts))
            expect(row.locator('button[data-action="restart"]')).to_be_enabled()
            shot(page, "agents-swarm")
            row.locator('button[data-action="restart"]').click()
            expect(page.locator("#toast")).to_contain_text("restart of dev-1 requested")
            wait_for(
                lambda: load_record(swarm.layout, "dev-1", "process").restarts == before.restarts + 1,
                30,
                "the restart count to increase",
            )
            after = wait_for(
                lambda: running(swarm, "dev-1") and load_record(swarm.layout, "dev-1", "process")
            )
            assert after.started_at != before.started_at, "a new run, not the old one"
            # The panel refreshes itself: the new count shows without a reload.
            restarts = str(before.restarts + 1)
            expect(page.locator('tr[data-agent="dev-1"] .restarts')).to_have_text(restarts, timeout=10_000)
        with ui_gateway.client(ui_gateway.operator_token) as op:
            metrics = op.get("/metrics").text
        assert f'kswarm_agent_restarts{{agent="dev-1"}} {before.restarts + 1}.0' in metrics


def test_quarantine_release_and_memory_rollback(ui_gateway: UiGateway, chromium: Path) -> None:
    with running_swarm(ui_gateway, AGENTS) as swarm:
        wait_for(lambda: running(swarm, "dev-1"), 60, "dev-1 running")
        memory_md = swarm.layout.agent_dir("dev-1", "memory") / "MEMORY.md"
        with ui_gateway.login() as browser:
            csrf = {"X-CSRF-Token": browser.csrf}
            held = browser.post("/ui/agents/dev-1/quarantine", headers=csrf)
            assert held.status_code == 200, held.text
            wait_for(lambda: load_record(swarm.layout, "dev-1", "process").state == "quarantined", 30)
            with ui_gateway.client(ui_gateway.operator_token) as op:
                dev1 = next(a for a in op.get("/api/agents").json() if a["name"] == "dev-1")
            assert dev1["disabled"] is True
            page = browser.get("/ui/agents").text
            assert 'data-action="release" data-agent="dev-1"' in page
            refused = browser.post("/ui/agents/dev-1/restart", headers=csrf)
            assert refused.status_code == 409 and "release it first" in refused.json()["message"]
            assert browser.post("/ui/agents/dev-1/release", headers=csrf).status_code == 200
            wait_for(lambda: running(swarm, "dev-1"), 60, "dev-1 running again after release")

            # Memory: snapshot, pollute, roll back through the UI.
            snap = browser.post("/ui/agents/dev-1/snapshot", headers=csrf).json()["message"].split()[2]
            clean = memory_md.read_text()
            memory_md.write_text(clean + "\nPOLLUTED: the verify check is optional\n")
            # The page shows what the supervisor published: the next pass carries the new text.
            wait_for(lambda: "POLLUTED" in browser.get("/ui/agents/dev-1/memory").text, 10, "it published")
            rolled = browser.post("/ui/agents/dev-1/rollback", json={"snapshot": snap}, headers=csrf)
            assert rolled.status_code == 200 and "restarting it" in rolled.json()["message"]
            assert memory_md.read_text() == clean
            bad = browser.post("/ui/agents/dev-1/rollback", json={"snapshot": "../../etc"}, headers=csrf)
            assert bad.status_code == 409 and "no snapshot" in bad.json()["message"]
        with browser_page(ui_gateway) as page:
            page.goto(f"{ui_gateway.url}/ui/agents/dev-1/memory")
            expect(page.locator("ul.snapshots li")).not_to_have_count(0)
            shot(page, "memory")
