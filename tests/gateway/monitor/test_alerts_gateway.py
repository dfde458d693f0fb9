"""Alerts end to end: a real gateway's feeder posts a stalled agent to a webhook and to a Slack-shaped
receiver with the public UI link; no API answer or log shows a target's URL; the spec's ``alerts:`` is
the monitor's own setting (``kswarm up`` hands it over) and ``kswarm validate`` refuses a bad one."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from alerts_kit import Receiver
from monitor_kit import MonitorGateway, fast_monitor

from gateway.monitor.alerts import AlertTarget
from kstest.cli import kswarm
from kstest.waiting import wait_for
from orchestrator.demo.spec import write_spec
from orchestrator.local.launcher import Launcher
from orchestrator.spec import load_spec, parse_spec

PUBLIC = "https://swarm.example.org"
SECRET = "T0001/B0002/s3cr3t-webhook-token"
SPEC = """swarm: s
agents: [{{name: dev}}]
alerts:
  - name: oncall
    kind: slack
    url: {url}
    min_severity: critical
    per_minute: 3
"""


@pytest.fixture
def receivers() -> Iterator[tuple[Receiver, Receiver]]:
    hook, slack = Receiver(), Receiver()
    yield hook, slack
    hook.close()
    slack.close()


def beat(gw: MonitorGateway, token: str) -> None:
    with gw.client(token) as c:
        assert c.post("/api/heartbeat", json={"state": "idle", "doing": ""}).is_success


def test_a_stalled_agent_reaches_both_receivers_with_the_public_link_and_no_answer_shows_the_url(
    receivers: tuple[Receiver, Receiver], short_tmp: Path, clean_redis: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    hook, slack = receivers
    gw = MonitorGateway(short_tmp / "home", clean_redis, public_url=PUBLIC)
    gw.monitor_settings = fast_monitor(
        alerts=[
            AlertTarget.model_validate({"name": "hook", "kind": "webhook", "url": hook.url(f"/h/{SECRET}")}),
            AlertTarget.model_validate({"name": "chat", "kind": "slack", "url": slack.url(f"/s/{SECRET}")}),
        ]
    )
    gw.start()
    try:
        dev = gw.add_principal("dev-3")
        beat(gw, dev)  # stalled 3 s later (fast_monitor)
        (body,) = hook.wait(1)
        assert body["event"] == "attention" and body["item"]["key"] == "agent:dev-3"
        assert body["item"]["title"] == "dev-3 is stalled" and body["link"] == f"{PUBLIC}/ui/agents/dev-3"
        (chat,) = slack.wait(1)
        assert "dev-3 is stalled" in chat["text"] and f"<{PUBLIC}/ui/agents/dev-3|" in chat["text"]
        # The feeder recomputes every 0.3 s: the item is still listed, but news only once. A second
        # agent's stall is the event that says later passes ran.
        beat(gw, gw.add_principal("dev-4"))
        keys = [b["item"]["key"] for b in hook.wait(2)]
        assert keys == ["agent:dev-3", "agent:dev-4"]
        with gw.client(gw.operator_token) as op:
            wait_for(
                lambda: 'kswarm_alerts_total{outcome="sent",target="hook"} 2.0' in op.get("/metrics").text,
                what="the sent alerts counted",
            )
        answers = every_get_answer(gw, gw.operator_token) + every_get_answer(gw, dev)
    finally:
        gw.stop()
    assert len(answers) > 20
    assert not [path for path, text in answers if SECRET in text or "/h/T0001" in text]
    assert SECRET not in "\n".join(r.getMessage() for r in caplog.records)


def every_get_answer(gw: MonitorGateway, token: str) -> list[tuple[str, str]]:
    """Each GET route without a path parameter, as ``token`` sees it (streams and waits skipped)."""
    assert gw.app is not None
    schema = gw.app.openapi()["paths"]
    paths = sorted(p for p, ops in schema.items() if "get" in ops and "{" not in p)
    answers = []
    with gw.client(token) as c:
        for path in paths:
            if "events" in path or "stream" in path or "wait" in path:
                continue
            try:
                answers.append((path, c.get(path, timeout=5).text))
            except httpx.TimeoutException:
                continue
    return answers


def test_the_spec_alerts_are_the_monitors_setting_when_kswarm_up_builds_the_gateway(tmp_path: Path) -> None:
    url = f"https://hooks.slack.example/services/{SECRET}"
    path = tmp_path / "swarm.yaml"
    path.write_text(SPEC.format(url=url))
    spec = load_spec(path)
    (monitor,) = [p for p in Launcher(tmp_path / "home", 0, path).gateway_plugins() if p.name == "monitor"]
    assert monitor.settings.alerts == spec.alerts
    assert monitor.settings.alerts[0].url.get_secret_value() == url
    # The demo rewrites a spec it was given: the operator's URL stays (not **********).
    again = load_spec(write_spec(spec, tmp_path / "demo" / "swarm.yaml"))
    assert again.alerts == spec.alerts


def test_kswarm_validate_accepts_alerts_and_refuses_a_bad_target_without_quoting_it(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(SPEC.format(url="https://hooks.slack.example/services/x"))
    result = kswarm(tmp_path / "home", "validate", "-f", str(good))
    assert result.returncode == 0, result.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(SPEC.format(url=f"ftp://hooks.example/{SECRET}").replace("kind: slack", "kind: sms"))
    result = kswarm(tmp_path / "home", "validate", "-f", str(bad))
    assert result.returncode == 2
    assert f"{bad}:5: alerts[0].kind: Input should be 'webhook' or 'slack'" in result.stderr
    assert (
        f"{bad}:6: alerts[0].url: an alert URL must be http:// or https:// (not ftp scheme)" in result.stderr
    )
    assert SECRET not in result.stderr + result.stdout
    with pytest.raises(ValueError, match="alerts: alert target 'oncall' is defined twice"):
        parse_spec(SPEC.format(url="http://h/") + "  - {name: oncall, kind: webhook, url: 'http://h/'}\n")
