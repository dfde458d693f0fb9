"""Attention's agent items from the supervisor's own states, on a real swarm: the orchestrator (process
backend, real processes) publishes its records to the swarm board (``ks:swarm:*``), the gateway reads
them. A crash-looping agent is listed with its exit status and the actions that help; quarantined (by
the item's own Quarantine action, through the UI with its CSRF token) it is listed as quarantined with
a Release action; released, an agent that runs again leaves the list. The CLI lists the same."""

from __future__ import annotations

from pathlib import Path

import pytest
from attention_kit import action_urls, attention_items, cli_attention, cli_attention_items
from monitor_ui_kit import MonitorUiGateway
from ui_kit import running_swarm

from kstest.waiting import wait_for
from orchestrator.supervisor.reconcile import load_record

CRASHER = '  - name: c-1\n    runtime: {command: ["python", "-c", "import sys; sys.exit(3)"]}\n'
# A real agent that heartbeats every second (the monitor here calls 3 s of silence stalled).
HEALTHY = "  - name: s-1\n    runtime: {heartbeat_s: 1}\n"


def item(gw: MonitorUiGateway, key: str, title: str) -> dict | None:
    found = attention_items(gw).get(key)
    return found if found and found["title"] == title else None


@pytest.mark.slow
def test_crash_loop_and_quarantine_come_and_go_on_attention(
    mon_ui: MonitorUiGateway, short_tmp: Path
) -> None:
    with running_swarm(mon_ui, CRASHER + HEALTHY, crash_loop_after=3, crash_window_s=30) as swarm:
        looping = wait_for(
            lambda: item(mon_ui, "agent:c-1", "c-1 is crash-looping"), 60, "c-1 crash-looping on Attention"
        )
        assert looping["severity"] == "critical" and looping["link"] == "/ui/agents/c-1", looping
        assert "keeps exiting" in looping["reason"] and "last exit 3" in looping["reason"], looping
        actions = action_urls(looping)
        assert actions == {"Restart": "/ui/agents/c-1/restart", "Quarantine": "/ui/agents/c-1/quarantine"}
        assert cli_attention_items(mon_ui, short_tmp)["agent:c-1"]["reason"] == looping["reason"]
        code, table, _ = cli_attention(mon_ui, short_tmp)
        assert code == 0 and "c-1 is crash-looping" in table and "/ui/agents/c-1" in table

        with mon_ui.login() as browser:
            csrf = {"X-CSRF-Token": browser.csrf}
            # The item's own action, as its button posts it.
            assert browser.post(actions["Quarantine"], headers=csrf).status_code == 200
            held = wait_for(
                lambda: item(mon_ui, "agent:c-1", "c-1 is quarantined"), 30, "c-1 listed as quarantined"
            )
            assert held["severity"] == "info" and "until an operator releases it" in held["reason"]
            assert action_urls(held) == {"Release": "/ui/agents/c-1/release"}
            assert cli_attention_items(mon_ui, short_tmp)["agent:c-1"]["title"] == "c-1 is quarantined"
            page = browser.get("/ui/attention", headers={"Accept": "text/html"}).text
            assert 'data-key="agent:c-1"' in page and "/ui/agents/c-1/release" in page

            # A healthy agent quarantined, then released: it runs again and leaves the list.
            wait_for(lambda: load_record(swarm.layout, "s-1", "process").state == "running", 60, "s-1 up")
            assert "agent:s-1" not in attention_items(mon_ui)
            assert browser.post("/ui/agents/s-1/quarantine", headers=csrf).status_code == 200
            wait_for(lambda: item(mon_ui, "agent:s-1", "s-1 is quarantined"), 30, "s-1 quarantined")
            release = action_urls(attention_items(mon_ui)["agent:s-1"])["Release"]
            assert browser.post(release, headers=csrf).status_code == 200
            wait_for(
                lambda: "agent:s-1" not in attention_items(mon_ui), 60, "s-1 off Attention once released"
            )
            assert "agent:s-1" not in cli_attention_items(mon_ui, short_tmp)
        # The crash-looping one stays listed: nothing resolved it.
        assert attention_items(mon_ui)["agent:c-1"]["title"] == "c-1 is quarantined"
