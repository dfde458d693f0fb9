"""One truth per state (issue 24): an agent's liveness is computed once, by the gateway
(gateway/swarm/liveness.py), and Attention, ``GET /api/agents/liveness``, the Agents page, the agent's
page, ``kswarm ps --json`` and ``kswarm agent list --json`` all show that same state.

A real swarm (the orchestrator, process backend, real processes) on a real gateway with the monitor
(stall threshold 3 s): ``s-1`` runs and sent one heartbeat, then none (stalled); ``c-1`` dies at once of a
missing package (crash-looping, and the package's name reaches the operator); ``q-1`` is quarantined."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from attention_kit import attention_items
from monitor_ui_kit import MonitorUiGateway
from typer.testing import CliRunner
from ui_kit import running_swarm

from kstest.waiting import wait_for
from orchestrator.cli.main import app

MISSING = "kswarm_runtime_not_installed"
AGENTS = (
    '  - name: c-1\n    runtime: {command: ["python", "-c", "import ' + MISSING + '"]}\n'
    '  - name: q-1\n    runtime: {command: ["python", "-c", "import time; time.sleep(600)"]}\n'
    '  - name: s-1\n    runtime: {command: ["python", "-c", "import time; time.sleep(600)"]}\n'
)
EXPECTED = {"c-1": "crash-looping", "q-1": "quarantined", "s-1": "stalled"}
HTML = {"Accept": "text/html"}


def kswarm(gw: MonitorUiGateway, *argv: str) -> tuple[int, str]:
    """The real CLI's ``ps`` and ``agent`` commands in-process, as the operator of ``gw``'s home."""
    env = {"KSWARM_HOME": str(gw.home), "KSWARM_URL": gw.url, "KSWARM_TOKEN": gw.operator_token}
    result = CliRunner().invoke(app, list(argv), env=env | {"COLUMNS": "250"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout


def cli_states(gw: MonitorUiGateway, *argv: str) -> dict[str, str]:
    code, out = kswarm(gw, *argv, "--json")
    assert code == 0, out
    return {r["agent"]: r["state"] for r in json.loads(out)}


def views(gw: MonitorUiGateway) -> dict[str, dict[str, str]]:
    """Each view's state per agent of the swarm."""
    with gw.client(gw.operator_token) as op:
        api = op.get("/api/agents/liveness").json()
    found = {"api": {a["name"]: a["state"] for a in api["agents"]}}
    titles = {i["subject"]: i["title"] for i in attention_items(gw).values() if i["kind"] == "agent"}
    found["attention"] = {
        name: title.removeprefix(f"{name} is ") for name, title in titles.items() if name in EXPECTED
    }
    found["ps"] = cli_states(gw, "ps")
    found["agent list"] = cli_states(gw, "agent", "list")
    with gw.login() as browser:
        page = browser.get("/ui/agents", headers=HTML).text
        rows = re.findall(r'<tr data-agent="([^"]+)".*?data-liveness="([^"]+)"', page, re.S)
        found["agents page"] = dict(rows)
        found["agent page"] = {}
        for name in EXPECTED:
            own = browser.get(f"/ui/agents/{name}", headers=HTML).text
            state = re.search(r'id="agent-liveness" data-liveness="([^"]+)"', own)
            found["agent page"][name] = state.group(1) if state else "missing"
    return {view: {n: s for n, s in states.items() if n in EXPECTED} for view, states in found.items()}


@pytest.mark.slow
def test_every_view_shows_the_one_computed_state(mon_ui: MonitorUiGateway) -> None:
    # Back-offs of seconds: a crash-looping agent stays down between its tries, long enough to compare.
    with running_swarm(mon_ui, AGENTS, crash_loop_after=2, backoff_base_s=2.0, backoff_max_s=30.0):
        with mon_ui.client(mon_ui.operator_token) as op:
            wait_for(lambda: op.get("/api/swarm").json()["agents"], 60, "the swarm published")
            token = op.post("/api/principals/s-1/tokens").json()["token"]
            held = op.post("/api/swarm/agents/q-1/quarantine")
            assert held.status_code in (200, 202), held.text
        with mon_ui.client(token) as s1:  # s-1 beats once, then never again while its process runs
            assert s1.post("/api/heartbeat", json={"state": "working", "doing": "x"}).status_code == 204

        def agreed() -> dict[str, dict[str, str]] | None:
            seen = views(mon_ui)
            return seen if all(states == EXPECTED for states in seen.values()) else None

        try:
            wait_for(agreed, 90, "every view to show the same state per agent")
        except AssertionError:
            raise AssertionError(f"the views disagree: {views(mon_ui)}") from None

        # Why, where the operator looks: the missing package on Attention and under `kswarm ps`.
        looping = attention_items(mon_ui)["agent:c-1"]
        assert f"No module named '{MISSING}'" in looping["reason"] and "last exit 1" in looping["reason"]
        code, table = kswarm(mon_ui, "ps")
        assert code == 0 and "c-1: crash-looping: " in table and f"No module named '{MISSING}'" in table
        stalled = attention_items(mon_ui)["agent:s-1"]
        assert stalled["severity"] == "critical" and "no heartbeat for" in stalled["reason"], stalled
        with mon_ui.client(mon_ui.operator_token) as op:
            api: dict[str, Any] = {a["name"]: a for a in op.get("/api/agents/liveness").json()["agents"]}
        assert api["s-1"]["supervisor_state"] == "running", "the supervisor's own threshold is 60 s"
        assert api["c-1"]["reason"] == looping["reason"]
        assert api["q-1"]["disabled"] and api["q-1"]["reason"].startswith("stopped, tokens revoked")


def test_liveness_needs_an_operator(mon_ui: MonitorUiGateway, short_tmp: Path) -> None:
    """An agent's token may not read the others' states and errors."""
    agent = mon_ui.add_principal("snoop")
    with mon_ui.client(agent) as snoop:
        assert snoop.get("/api/agents/liveness").status_code == 403
