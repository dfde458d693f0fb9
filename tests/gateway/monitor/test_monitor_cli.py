"""``kswarm attention [--json]`` and ``kswarm agent timeline NAME [-f]`` against a real gateway.

The real ``kswarm`` app (``orchestrator.cli.main.app``), driven in-process by typer's runner.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import pytest
from monitor_kit import MonitorGateway, entry
from typer.testing import CliRunner

from gateway.client import GatewayClient, GatewayTarget
from kstest.waiting import wait_for
from orchestrator.cli.main import app
from orchestrator.cli.timeline import follow


def run(gw: MonitorGateway, token: str, tmp: Path, *argv: str) -> tuple[int, str, str]:
    env = {"KSWARM_URL": gw.url, "KSWARM_TOKEN": token, "KSWARM_HOME": str(tmp / "no-home"), "COLUMNS": "200"}
    result = CliRunner().invoke(app, list(argv), env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def beat(gw: MonitorGateway, token: str) -> None:
    with gw.client(token) as c:
        assert c.post("/api/heartbeat", json={"state": "idle", "doing": ""}).is_success


def test_attention_lists_a_stalled_agent_in_json_and_as_a_table(
    mon_gateway: MonitorGateway, tmp_path: Path
) -> None:
    dev = mon_gateway.add_principal("dev-3")
    beat(mon_gateway, dev)
    op = mon_gateway.operator_token

    def stalled() -> dict | None:
        code, out, _ = run(mon_gateway, op, tmp_path, "attention", "--json")
        assert code == 0
        items = json.loads(out)["items"]
        return next((i for i in items if i["key"] == "agent:dev-3"), None)

    item = wait_for(stalled, what="dev-3 stalled on attention")  # stall_after_s is 3 s here
    assert item["severity"] == "critical" and item["link"] == "/ui/agents/dev-3"
    code, out, _ = run(mon_gateway, op, tmp_path, "attention")
    assert code == 0 and "dev-3 is stalled" in out and "no heartbeat for" in out
    beat(mon_gateway, dev)  # it recovers: off the list
    code, out, _ = run(mon_gateway, op, tmp_path, "attention", "--json")
    assert "agent:dev-3" not in {i["key"] for i in json.loads(out)["items"]}


def test_attention_is_for_operators_only(mon_gateway: MonitorGateway, tmp_path: Path) -> None:
    dev = mon_gateway.add_principal("dev-1")
    code, out, err = run(mon_gateway, dev, tmp_path, "attention", "--json")
    assert code != 0 and out == ""
    assert err.strip().startswith("error: ") and len(err.strip().splitlines()) == 1


def test_agent_timeline_prints_entries_in_order(mon_gateway: MonitorGateway, tmp_path: Path) -> None:
    dev = mon_gateway.add_principal("dev-7")
    with mon_gateway.client(dev) as c:
        entries = [
            entry("wake", "woken by a DM from operator"),
            entry("model", "m: 120 in / 30 out tokens, tool_use", model="m"),
            entry("tool_call", "bash(git commit -m softmax)", name="bash", call_id="c1"),
        ]
        assert c.post("/api/timeline", json={"entries": entries}).status_code == 200
    code, out, err = run(mon_gateway, mon_gateway.operator_token, tmp_path, "agent", "timeline", "dev-7")
    assert code == 0, err
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines[0].startswith("dev-7: running bash")
    order = [next(k for k in ("wake", "model", "tool_call") if f" {k} " in line) for line in lines[1:]]
    assert order == ["wake", "model", "tool_call"]
    code, out, _ = run(
        mon_gateway, mon_gateway.operator_token, tmp_path, "agent", "timeline", "dev-7", "--json"
    )
    assert [json.loads(line)["kind"] for line in out.splitlines()] == ["wake", "model", "tool_call"]
    # Another agent may not read dev-7's timeline; a bad -n is one line, exit 2.
    other = mon_gateway.add_principal("dev-8")
    code, _, err = run(mon_gateway, other, tmp_path, "agent", "timeline", "dev-7")
    assert code != 0 and err.strip().startswith("error: ")
    code, _, err = run(
        mon_gateway, mon_gateway.operator_token, tmp_path, "agent", "timeline", "dev-7", "-n", "0"
    )
    assert code == 2 and "-n is 1..500" in err


def test_follow_yields_entries_reported_later(mon_gateway: MonitorGateway) -> None:
    dev = mon_gateway.add_principal("dev-2")
    with httpx.Client(base_url=mon_gateway.url, headers={"Authorization": f"Bearer {dev}"}) as c:
        c.post("/api/timeline", json={"entries": [entry("wake", "first")]})
    target = GatewayTarget(url=mon_gateway.url, token=mon_gateway.operator_token)
    seen: list[str] = []
    stop = threading.Event()

    def post_later() -> None:
        time.sleep(0.5)
        with httpx.Client(base_url=mon_gateway.url, headers={"Authorization": f"Bearer {dev}"}) as c:
            for i in range(3):
                c.post("/api/timeline", json={"entries": [entry("tool_call", f"later {i}", name="bash")]})

    poster = threading.Thread(target=post_later)
    poster.start()
    with GatewayClient(target) as gateway:
        first = gateway.get("/api/agents/dev-2/timeline", limit=1)["entries"][0]["id"]
        deadline = time.monotonic() + 20
        for e in follow(
            gateway, "dev-2", first, None, poll_s=0.1, keep_going=lambda: time.monotonic() < deadline
        ):
            seen.append(e["summary"])
            if len(seen) == 3:
                break
    poster.join()
    stop.set()
    assert seen == ["later 0", "later 1", "later 2"]


@pytest.mark.parametrize(
    "argv", [("agent", "timeline", "Bad_Name"), ("agent", "timeline", "dev-1", "--kind", "x")]
)
def test_agent_timeline_bad_input_is_one_line(
    mon_gateway: MonitorGateway, tmp_path: Path, argv: tuple[str, ...]
) -> None:
    code, _, err = run(mon_gateway, mon_gateway.operator_token, tmp_path, *argv)
    assert code != 0 and len(err.strip().splitlines()) == 1 and err.startswith("error: ")
