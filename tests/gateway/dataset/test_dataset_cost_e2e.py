"""What a kernel cost, end to end on a real gateway (forge and gate, task board, job runner, LLM proxy,
monitor): alice claims a task, spends tokens through the proxy against the scripted model upstream (her
first model calls ever), verifies her kernel, it is reviewed and merged; bob spends while holding no
task. ``kswarm dataset build`` then puts what alice spent on the task in the accepted record
(``cost_tokens``/``cost_usd``) and in the card; bob's spending is nobody's kernel."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from datasetkit import DatasetGateway, Lab
from forgekit import Swarm
from redis import Redis
from typer.testing import CliRunner

from gateway.client.jobs.pools import NodeConfig, PoolConfig
from gateway.dataset.plugin import DatasetPlugin
from gateway.forge.plugin import ForgePlugin
from gateway.forge.settings import ForgeSettings
from gateway.jobs.plugin import JobsPlugin
from gateway.jobs.settings import JobsSettings
from gateway.llm.config import LLMProxySettings, ModelPrice
from gateway.llm.plugin import LLMProxyPlugin
from gateway.monitor import keys
from gateway.monitor.plugin import MonitorPlugin
from gateway.monitor.settings import MonitorSettings
from gateway.plugin import Plugin
from gateway.tasks.catalogue import TASKS_DIR, solution_path
from gateway.tasks.plugin import TasksPlugin
from kstest.upstream import ScriptedUpstream, text_reply
from orchestrator.cli.main import app

MODEL = "claude-cost-1"
PRICE = ModelPrice(input=3.0, output=15.0, cache_write=3.75, cache_read=0.3)  # USD per million tokens
UPSTREAM_KEY = "sk-ant-test-cost-e2e"
KERNEL = "kernels/add/alice_add.py"


def usd(tokens_in: int, tokens_out: int) -> float:
    return (tokens_in * PRICE.input + tokens_out * PRICE.output) / 1e6


class CostGateway(DatasetGateway):
    """The dataset gateway's plugins plus the LLM proxy (to ``upstream_url``) and the monitor."""

    upstream_url = ""

    def plugins(self) -> list[Plugin[Any]]:
        forge = ForgePlugin(ForgeSettings(gate_sweep_s=0.5, default_repo="kswarm/dataset"))
        pool = PoolConfig(name="cpu", nodes=[NodeConfig(name="local", devices=[0])], tasks_dir=TASKS_DIR)
        llm = LLMProxySettings(
            upstream_url=self.upstream_url, api_key=UPSTREAM_KEY, prices={MODEL: PRICE}, max_retries=0
        )
        monitor = MonitorSettings(sample_s=0.3, attention_every_s=1.0, lease_s=5.0)
        return [
            forge,
            TasksPlugin(),
            JobsPlugin(JobsSettings(pools=[pool])),
            LLMProxyPlugin(llm),
            MonitorPlugin(monitor),
            DatasetPlugin(),  # serves the build under its home: what `kswarm cost --kernel` reads
        ]


def spend(gw: CostGateway, token: str, upstream: ScriptedUpstream, tokens_in: int, tokens_out: int) -> None:
    """One model call through the gateway's proxy, as an agent's SDK makes it (its own token as the key)."""
    upstream.script(text_reply("ok", usage={"input_tokens": tokens_in, "output_tokens": tokens_out}))
    # A request whose reservation (bytes / 3 + max_tokens) covers what it is booked: more would stop alice.
    content = "write add " + "x" * 3 * tokens_in
    body = {
        "model": MODEL,
        "max_tokens": max(64, tokens_out),
        "messages": [{"role": "user", "content": content}],
    }
    with httpx.Client(base_url=gw.url, headers={"x-api-key": token}, timeout=30, trust_env=False) as c:
        reply = c.post("/v1/messages", json=body)
    assert reply.status_code == 200, reply.text


def monitor_cost(gw: CostGateway) -> dict[str, Any]:
    with gw.op() as op:
        reply = op.get("/api/monitor/cost")
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def wait_for(predicate: Callable[[], object], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def wait_booked(gw: CostGateway, task: str, agent: str, tokens: int) -> None:
    def booked() -> bool:
        lines = monitor_cost(gw)["lines"]
        return any(x["task"] == task and x["agent"] == agent and x["tokens"] == tokens for x in lines)

    try:
        wait_for(booked, f"{agent}'s {tokens} tokens booked to {task}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {monitor_cost(gw)['lines']}") from None


@pytest.mark.slow
def test_the_accepted_record_and_the_card_carry_what_its_author_spent(
    clean_redis: str, short_tmp: Path
) -> None:
    with ScriptedUpstream(api_key=UPSTREAM_KEY) as upstream:
        CostGateway.upstream_url = upstream.url
        gw = CostGateway(short_tmp / "home", clean_redis)
        gw.start()
        try:
            gw.tokens = {n: gw.add_principal(n) for n in ("alice", "bob")}
            gw.tokens["worker1"] = gw.add_principal("worker1", "worker")
            with gw.op() as op:
                seeded = op.post("/api/tasks/seed", json={"post_tasks": False})
                assert seeded.status_code == 200, seeded.text
                policy = {"required_approvals": 1, "required_checks": ["kswarm/verify:cpu"]}
                assert op.put("/api/forge/repos/kswarm/dataset/policy", json=policy).status_code == 200
                assert op.post("/api/tasks", json={"id": "add", "title": "Add"}).status_code == 201
            with gw.client(gw.tokens["alice"]) as alice:
                assert alice.post("/api/tasks/add/claim").status_code == 200
            watching = Redis.from_url(gw.redis_url, decode_responses=True)
            wait_for(lambda: watching.hexists(keys.USAGE_LAST, keys.USAGE_WATCHING), "the monitor sampling")
            watching.close()
            # alice's first model calls ever, while she holds the claim: they are the kernel's cost.
            spend(gw, gw.tokens["alice"], upstream, 1_200, 300)
            spend(gw, gw.tokens["alice"], upstream, 800, 200)
            spend(gw, gw.tokens["bob"], upstream, 500, 0)  # bob holds nothing
            wait_booked(gw, "add", "alice", 2_500)
            wait_booked(gw, "-", "bob", 500)

            swarm = Swarm(gw, short_tmp / "git", "kswarm", "dataset", gw.tokens)
            lab, work = Lab(gw, swarm), {}
            lab.push("alice", "alice/add", KERNEL, solution_path("add").read_text(), work)
            job = lab.verify("alice", "add", KERNEL, "alice/add", True)
            pr = swarm.open_pr("alice", "alice/add", reviewers=("bob",))
            assert swarm.review("bob", pr, "APPROVED").status_code == 200
            swarm.wait_merged(pr)
            with gw.client(gw.tokens["alice"]) as alice:
                assert (
                    alice.post("/api/tasks/add/done", json={"result": f"PR #{pr} merged"}).status_code == 200
                )

            out = gw.home / "dataset"  # where the gateway serves the last build from
            env = {"KSWARM_URL": gw.url, "KSWARM_TOKEN": gw.operator_token}
            argv = [
                "dataset",
                "build",
                "--repo",
                "kswarm/dataset",
                "--out",
                str(out),
                "--home",
                str(short_tmp),
            ]
            result = CliRunner().invoke(app, [*argv, "--json"], env=env)
            assert result.exit_code == 0, result.output
            # "What did this kernel cost?": the build's answer, by its file and by its PR.
            by_kernel = CliRunner().invoke(app, ["cost", "--kernel", KERNEL, "--json"], env=env)
            assert by_kernel.exit_code == 0, by_kernel.output
            by_pr = CliRunner().invoke(app, ["cost", "--pr", str(pr)], env=env)
            assert by_pr.exit_code == 0, by_pr.output
        finally:
            gw.stop()

    [record] = [json.loads(line) for line in (out / "data" / "records.jsonl").read_text().splitlines()]
    assert record["record_id"] == job and record["accepted"] and record["author"] == "alice"
    assert record["cost_tokens"] == 2_500, record
    assert record["cost_usd"] == pytest.approx(usd(2_000, 500), abs=1e-6)
    kernel_cost = json.loads(by_kernel.stdout)
    assert [r["record_id"] for r in kernel_cost["records"]] == [job] and kernel_cost["estimate"] is False
    assert kernel_cost["total"]["tokens"] == 2_500 and not kernel_cost["prices"]
    assert kernel_cost["total"]["cost_usd"] == pytest.approx(usd(2_000, 500), abs=1e-6)
    assert f"${usd(2_000, 500):.4f}" in by_pr.stdout and KERNEL in by_pr.stdout, by_pr.stdout
    summary = json.loads((out / "summary.json").read_text())["cost"]
    assert summary["by_task"]["add"]["tokens"] == 2_500 and summary["by_task"]["-"]["tokens"] == 500
    assert summary["usd_per_accepted"] == pytest.approx(usd(2_000, 500), abs=1e-6)
    assert summary["total_usd"] == pytest.approx(usd(2_500, 500), abs=1e-6)
    card = (out / "README.md").read_text()
    per_kernel = f"${usd(2_000, 500):.4f}"
    assert f"| add | 2500 | {per_kernel} | 1 | {per_kernel} |" in card, card
    assert f"**{per_kernel} and 2500\ntokens per accepted kernel**" in card
