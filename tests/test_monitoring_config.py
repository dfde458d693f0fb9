"""The monitoring that ships in infra/ (docs/deploy.md, "Monitoring"): the Grafana dashboard, the
Prometheus scrape config and alert rules parse, every metric their PromQL names is one a real gateway
exports on /metrics, and the compose profile wires them on loopback. No Grafana, no Prometheus server,
no network: promtool (Debian's prometheus package, infra/ci/system-packages.sh) checks and unit-tests the
rules where it is installed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config import GatewaySettings
from kstest.gateway import GatewayThread

REPO = Path(__file__).resolve().parent.parent
DASHBOARDS = REPO / "infra" / "grafana" / "dashboards"
DATASOURCES = REPO / "infra" / "grafana" / "provisioning" / "datasources" / "prometheus.yaml"
PROMETHEUS = REPO / "infra" / "prometheus"
SEVERITIES = {"warning", "critical"}
# Series Prometheus makes itself for every scrape target (not in the target's /metrics).
SCRAPE_SERIES = {"up"}
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool"}
PROMQL_OPERATORS = {"and", "or", "unless"}


def dashboards() -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(DASHBOARDS.glob("*.json"))]


def panels_of(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel that shows data (rows hold none), nested rows' panels included."""
    found: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            found.extend(panel.get("panels", []))
        else:
            found.append(panel)
    return found


def rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def every_expression() -> list[tuple[str, str]]:
    """(where, PromQL) of every dashboard target and every rule."""
    found = [
        (f"dashboard {d['uid']} panel {p['title']!r}", target["expr"])
        for d in dashboards()
        for p in panels_of(d)
        for target in p["targets"]
    ]
    return found + [(f"rule {rule['alert']}", rule["expr"]) for rule in rules()]


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: what is left once strings, label matchers, ranges,
    offsets, grouping clauses, functions, operators and numbers are taken out."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings ({{ }} and label values)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = re.sub(r"\boffset\s+\w+", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w$.])([a-zA-Z_:][\w:]*)(\s*\()?", text):
        word, is_call = match.group(1), match.group(2)
        if is_call or word in PROMQL_WORDS or word in PROMQL_OPERATORS:
            continue
        names.add(word)
    return names


def exported_series(exposition: str) -> set[str]:
    """Every series name a scrape of this exposition can hold, also of a labelled metric that has no
    child yet (it shows only its # TYPE line): a counter's _total and _created, a histogram's _bucket,
    _sum, _count and _created, a gauge's own name."""
    names = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            if kind == "counter":
                names |= {name, name.removesuffix("_total") + "_created"}
            elif kind == "histogram":
                names |= {name + suffix for suffix in ("_bucket", "_sum", "_count", "_created")}
            else:
                names.add(name)
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def test_the_name_extraction_finds_what_an_expression_selects() -> None:
    expr = (
        'sum by (pool) (increase(kswarm_jobs_finished_total{state=~"error|timeout"}[30m])) / '
        "kswarm_agent_restarts offset 15m and on (pool) up == 0 or vector(0)"
        " + histogram_quantile(0.95, sum by (le) (rate(kswarm_nope_bucket[$__rate_interval])))"
    )
    assert metric_names(expr) == {
        "kswarm_jobs_finished_total",
        "kswarm_agent_restarts",
        "up",
        "kswarm_nope_bucket",
    }


def test_every_metric_the_dashboards_and_rules_use_is_one_a_real_gateway_exports(
    gateway: GatewayThread,
) -> None:
    with gateway.client(gateway.operator_token) as operator:
        scrape = operator.get("/metrics")
    assert scrape.status_code == 200, scrape.text
    exported = exported_series(scrape.text) | SCRAPE_SERIES
    assert "kswarm_jobs_finished_total" in exported and "kswarm_llm_proxy_seconds_bucket" in exported
    expressions = every_expression()
    assert len(expressions) > 20
    unknown = []
    for where, expr in expressions:
        names = metric_names(expr)
        assert names, f"{where}: no metric in {expr!r}"
        unknown += [f"{where}: {name}" for name in sorted(names - exported)]
    assert not unknown, "metrics no gateway exports:\n" + "\n".join(unknown)


def test_the_dashboard_is_grafana_s_model_with_a_title_a_unit_and_a_query_on_every_panel() -> None:
    (dashboard,) = dashboards()
    datasource_uid = yaml.safe_load(DATASOURCES.read_text())["datasources"][0]["uid"]
    assert dashboard["uid"] and dashboard["title"] and isinstance(dashboard["schemaVersion"], int)
    panels = panels_of(dashboard)
    assert len(panels) >= 15
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        name = panel.get("title")
        assert name and panel.get("description"), panel
        assert panel["type"] in {"timeseries", "stat"}, name
        assert panel["fieldConfig"]["defaults"]["unit"], f"{name} has no unit"
        assert panel["datasource"]["uid"] == datasource_uid, name
        assert panel["targets"] and all(t["expr"].strip() and t["refId"] for t in panel["targets"]), name
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, name


def test_the_alert_rules_cover_the_troubles_an_operator_is_paged_for() -> None:
    every = rules()
    names = [rule["alert"] for rule in every]
    assert len(names) == len(set(names))
    for rule in every:
        assert rule["expr"].strip(), rule["alert"]
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
        assert re.fullmatch(r"\d+[smh]", str(rule.get("for", "0s"))), rule["alert"]
    wanted = {
        "KswarmAgentsStalled",
        "KswarmJobsFailing",
        "KswarmBudgetExhausted",
        "KswarmSpendRateHigh",
        "KswarmQueueBackingUp",
        "KswarmQueueNotServed",
        "KswarmGatewayDown",
    }
    assert wanted <= set(names)


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("promtool") is None:
        pytest.skip("promtool is not installed (apt-get install prometheus; infra/ci/system-packages.sh)")
    return subprocess.run(["promtool", *args], capture_output=True, text=True, cwd=PROMETHEUS)


def test_promtool_accepts_the_rules_and_their_unit_tests_pass() -> None:
    checked = promtool("check", "rules", "alerts.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", "alerts.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_promtool_accepts_the_scrape_config() -> None:
    checked = promtool("check", "config", "--syntax-only", "prometheus.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_compose_profile_scrapes_the_gateway_on_loopback_with_the_operator_s_secret() -> None:
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    services = compose["services"]
    prometheus, grafana = services["prometheus"], services["grafana"]
    for service in (prometheus, grafana):
        assert service["profiles"] == ["monitoring"]
        assert service["network_mode"] == "host"  # never a Docker network
        assert service["healthcheck"]["test"]
    assert "--web.listen-address=127.0.0.1:9090" in prometheus["command"]
    assert grafana["environment"]["GF_SERVER_HTTP_ADDR"] == "127.0.0.1"
    assert grafana["environment"]["GF_AUTH_DISABLE_LOGIN_FORM"] == "true"  # no default admin login
    assert prometheus["secrets"] == ["operator_token"] and "environment" not in prometheus

    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "kswarm-gateway"  # what KswarmGatewayDown selects
    port = GatewaySettings.model_fields["port"].default
    assert job["static_configs"] == [{"targets": [f"127.0.0.1:{port}"]}]
    assert job["authorization"]["credentials_file"] == "/run/secrets/operator_token/operator_token"
    mounted = {v.split(":")[1]: v.split(":")[0] for v in prometheus["volumes"] if v.startswith("./")}
    for rule_file in config["rule_files"]:
        assert (REPO / mounted[rule_file]).is_file(), rule_file
    datasource = yaml.safe_load(DATASOURCES.read_text())["datasources"][0]
    assert datasource["url"] == "http://127.0.0.1:9090"
