"""The overview over HTTP: ``GET /api/monitor/overview`` against each component's own routes, the page
against the API (one computation), every figure's link, every chart's latest figures against the API's
own, the chart window of a young swarm, and who may read it (operators only)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from overview_kit import FAILED, OverviewGateway, call, figures, jobs_of, make_swarm, overview

from gateway.monitor.models import Series
from kstest.waiting import wait_for

HTML = {"Accept": "text/html"}


@pytest.fixture
def ov_ui(clean_redis: str, short_tmp: Path) -> Iterator[OverviewGateway]:
    gw = OverviewGateway(short_tmp / "home", clean_redis)
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


def expected_from_the_components(gw: OverviewGateway) -> dict[str, float]:
    """The overview's figures, counted from the components' own REST routes."""
    op = gw.operator_token
    now = time.time()
    out: dict[str, float] = {}
    board = call(gw, op, "GET", "/api/tasks").json()
    for state in ("open", "claimed", "done"):
        out[f"tasks.{state}"] = sum(1 for t in board if t["state"] == state)
    open_prs = call(gw, op, "GET", "/api/forge/pulls", params={"state": "open"}).json()
    closed = call(gw, op, "GET", "/api/forge/pulls", params={"state": "closed"}).json()
    merged = [p for p in closed if p["state"] == "merged"]
    out["prs.open"] = len(open_prs)
    out["prs.merged"] = out["throughput.accepted"] = len(merged)
    recent = [p for p in merged if (p.get("merged_at") or 0) >= now - 3600]
    out["prs.merged_last_hour"] = out["throughput.accepted_last_hour"] = len(recent)
    pools = [p["pool"] for p in call(gw, op, "GET", "/api/jobs/pools").json()]
    for i, pool in enumerate(pools):
        out[f"pools.{i}.queued"] = len(jobs_of(gw, pool=pool, state="queued"))
        out[f"pools.{i}.running"] = len(jobs_of(gw, pool=pool, state="running"))
        out[f"pools.{i}.failed_last_hour"] = sum(
            1 for j in jobs_of(gw, pool=pool) if j["state"] in FAILED and (j["finished"] or 0) >= now - 3600
        )
    usage = call(gw, op, "GET", "/api/usage").json()["swarm"]
    out["spend.today_usd"], out["spend.total_usd"] = usage["today_cost_usd"], usage["cost_usd"]
    return out


def test_the_overview_counts_what_each_component_lists(ov_ui: OverviewGateway, short_tmp: Path) -> None:
    swarm = make_swarm(ov_ui, short_tmp)
    wait_for(
        lambda: overview(ov_ui)["prs"]["merged"]["value"] == 1, timeout=60, what="the gate merges the PR"
    )
    data = overview(ov_ui)
    got = {path: f["value"] for path, f in figures(data).items()}
    want = expected_from_the_components(ov_ui)
    assert {k: got[k] for k in want} == want
    assert [p["pool"] for p in data["pools"]] == ["cpu", "gpu-h100", "npu-910c"]
    # What the scenario made, so that the comparison above cannot pass on empty lists.
    assert (want["tasks.open"], want["tasks.claimed"], want["tasks.done"]) == (1, 1, 1)
    assert (want["prs.open"], want["prs.merged"], want["prs.merged_last_hour"]) == (1, 1, 1)
    assert (want["pools.1.running"], want["pools.2.queued"], want["pools.1.failed_last_hour"]) == (1, 1, 1)
    assert want["pools.0.failed_last_hour"] == 1  # the unverifiable job on cpu
    assert data["prs"]["waiting"]["value"] + data["prs"]["blocked"]["value"] == 1
    agents = {k: v["value"] for k, v in data["agents"].items()}
    # dev-1 working, dev-2 idle, dev-3 stalled; reviewer never beat (down).
    assert agents == {"up": 2, "working": 1, "idle": 1, "stalled": 1, "down": 1}, agents
    spend = data["spend"]
    assert spend["today_usd"]["value"] > 0 and spend["budget_usd_per_day"] == 5.0
    assert spend["today_tokens"] == 15_000
    # The monitor samples the proxy's books: the last hour's spend is all of it (nothing before it).
    wait_for(
        lambda: abs(overview(ov_ui)["spend"]["last_hour_usd"]["value"] - spend["total_usd"]["value"]) < 1e-9,
        what="the last hour's spend sampled",
    )
    assert data["throughput"]["per_hour_since_start"] == 1.0  # one merge, a swarm younger than an hour
    assert data["started_at"] and data["started_at"] <= data["computed_at"]
    assert {i["key"] for i in data["attention"]["items"]} >= {"agent:dev-3", "pool:npu-910c"}
    assert all(state.startswith("ok") for state in data["sources"].values()), data["sources"]
    assert swarm.merged_pr != swarm.waiting_pr


def test_the_page_shows_the_apis_figures_and_each_links_to_its_list(
    ov_ui: OverviewGateway, short_tmp: Path
) -> None:
    make_swarm(ov_ui, short_tmp)
    with ov_ui.login() as browser:
        assert browser.get("/ui", headers=HTML).headers["location"] == "/ui/overview"
        page = browser.get("/ui/overview", headers=HTML)
        assert page.status_code == 200, page.text
        data = overview(ov_ui)
        shown = dict(re.findall(r'data-figure="([^"]+)" data-value="([^"]+)"', page.text))
        api = figures(data)
        # The job figures cannot move between the two reads: nothing runs in between.
        assert set(shown) == set(api)
        for path in ("tasks.open", "tasks.done", "pools.1.running", "pools.2.queued", "agents.stalled"):
            assert float(shown[path]) == api[path]["value"], path
        for item in data["attention"]["items"]:
            assert f'data-key="{item["key"]}"' in page.text  # Attention on top, the same items
        for path, fig in api.items():
            listed = browser.get(fig["link"], headers=HTML)
            assert listed.status_code == 200, (path, fig["link"], listed.status_code)
        claimed = browser.get(api["tasks.claimed"]["link"], headers=HTML).text
        assert 'data-task="t-claimed"' in claimed and 'data-task="t-open"' not in claimed
        jobs = browser.get(api["pools.1.running"]["link"], headers=HTML).text
        assert "/ui/jobs?pool=gpu-h100" == api["pools.1.running"]["link"]
        assert 'class="active">gpu-h100</a>' in jobs


def test_every_charts_latest_figures_are_the_apis(ov_ui: OverviewGateway, short_tmp: Path) -> None:
    from jobs_kit import finish_running

    swarm = make_swarm(ov_ui, short_tmp)
    op = ov_ui.operator_token

    def chart(name: str) -> dict[str, Series]:
        reply = call(ov_ui, op, "GET", f"/api/monitor/charts/{name}")
        assert reply.status_code == 200, reply.text
        return {s["name"]: Series.model_validate(s) for s in reply.json()}

    def total(name: str) -> dict[str, float]:
        return {label: sum(p.value for p in s.points) for label, s in chart(name).items()}

    pools = [p["pool"] for p in call(ov_ui, op, "GET", "/api/jobs/pools").json()]

    def queue_now() -> dict[str, float]:
        return {label: s.points[-1].value for label, s in chart("queue").items()}

    def queue_listed() -> dict[str, float]:
        return {
            f"{state}:{pool}": float(len(jobs_of(ov_ui, pool=pool, state=state)))
            for pool in pools
            for state in ("queued", "running")
        }

    # A job runs: the queue chart's newest point says so at once (not at the next sample).
    assert queue_now() == queue_listed()
    assert queue_now()["running:gpu-h100"] == 1 and queue_now()["queued:npu-910c"] == 1
    finish_running(ov_ui, swarm.jobs)
    assert queue_now() == queue_listed() and queue_now()["running:gpu-h100"] == 0

    def finished_listed() -> dict[str, float]:
        finished = {}
        for pool in pools:
            count = sum(1 for j in jobs_of(ov_ui, pool=pool) if j["state"] not in ("queued", "running"))
            if count:
                finished[pool] = float(count)
        return finished

    wait_for(lambda: total("jobs") == finished_listed(), what="jobs finished per pool")
    usage = call(ov_ui, op, "GET", "/api/usage").json()["agents"]
    spent = {name: u for name, u in usage.items() if u["total_tokens"]}
    wait_for(lambda: total("tokens") == {n: u["total_tokens"] for n, u in spent.items()}, what="tokens")
    cost = total("cost")
    assert cost.keys() == spent.keys()
    assert all(abs(cost[n] - u["cost_usd"]) < 1e-9 for n, u in spent.items()), (cost, spent)
    closed = call(ov_ui, op, "GET", "/api/forge/pulls", params={"state": "closed"}).json()
    merged = float(sum(1 for p in closed if p["state"] == "merged"))
    assert merged == 1
    wait_for(lambda: total("throughput") == {"accepted": merged}, timeout=30, what="kernels accepted")
    wait_for(lambda: total("gate").get("merged") == merged, what="the gate's merges")
    # Pass rate per task: every verdict of a task in this scenario agrees (add fails, softmax passes).
    verdicts: dict[str, list[bool]] = {}
    for job in jobs_of(ov_ui):
        if job.get("verdict"):
            verdicts.setdefault(job["task"], []).append(job["verdict"] == "pass")
    want = {task: 100.0 * sum(v) / len(v) for task, v in verdicts.items()}
    assert want == {"add": 0.0, "softmax": 100.0}

    def rates() -> dict[str, set[float]]:
        return {task: {p.value for p in s.points} for task, s in chart("pass-rate").items()}

    wait_for(lambda: rates() == {task: {rate} for task, rate in want.items()}, what="pass rates")
    # Messages: every message on the stream is counted once, by kind.
    for i in range(3):
        body = {"text": f"note {i}"}
        posted = call(ov_ui, swarm.jobs.tokens["dev-1"], "POST", "/api/channels/general/messages", json=body)
        assert posted.status_code == 201, posted.text

    def messages_listed() -> float:
        count = 0
        for channel in call(ov_ui, op, "GET", "/api/channels").json():
            page = call(ov_ui, op, "GET", f"/api/channels/{channel['name']}/messages", params={"limit": 1000})
            count += len(page.json()["messages"])
        return float(count)

    wait_for(lambda: sum(total("messages").values()) == messages_listed() >= 3, what="messages by kind")


def test_a_young_swarms_charts_span_its_lifetime_with_titles_and_units(ov_ui: OverviewGateway) -> None:
    op = ov_ui.operator_token
    started = wait_for(lambda: overview(ov_ui)["started_at"], what="the monitor's start")
    svg = call(ov_ui, op, "GET", "/api/monitor/svg/queue").text
    assert 'class="chart-title"' in svg and "Jobs queued and running per pool</text>" in svg
    assert "jobs (sampled)</text>" in svg and "since the swarm started" in svg
    tokens = call(ov_ui, op, "GET", "/api/monitor/svg/tokens").text
    assert "tokens per 1 min</text>" in tokens
    series = call(ov_ui, op, "GET", "/api/monitor/charts/queue").json()
    first = min(s["points"][0]["ts"] for s in series)
    assert started - 60 <= first <= started, (first, started)  # not six hours of nothing before it
    old = call(ov_ui, op, "GET", "/api/monitor/svg/queue", params={"since": started - 7200}).text
    assert "since the swarm started" in old
    with ov_ui.login() as browser:
        page = browser.get("/ui/charts", headers=HTML).text
    for name in ("tokens", "cost", "messages", "queue", "jobs", "throughput", "pass-rate", "gate"):
        assert f'id="chart-{name}"' in page, name
    assert page.count('class="chart-title"') == 8 and page.count('class="chart-axis"') == 8


@pytest.mark.parametrize("kind", ["agent", "worker"])
def test_only_operators_read_the_overview(ov_ui: OverviewGateway, kind: str) -> None:
    token = ov_ui.add_principal(f"spy-{kind}", kind)
    for path in ("/api/monitor/overview", "/ui/api/monitor/overview", "/ui/overview"):
        reply = call(ov_ui, token, "GET", path)
        assert reply.status_code == 403, (path, reply.status_code, reply.text)
        assert "tasks" not in reply.text
    anonymous = call(ov_ui, "", "GET", "/api/monitor/overview")
    assert anonymous.status_code == 401
