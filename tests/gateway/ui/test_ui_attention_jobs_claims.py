"""Attention's items from the job runner and the task board, on a real gateway: a dead-lettered job (a
worker that took it and went silent, reclaimed once too often), a speedup the harness flagged for a human
look, and a claim whose lease lapsed. Each is listed with its reason, link and actions, by
``/api/attention``, ``kswarm attention --json`` and the page, and leaves the list when resolved: the
dead letter once the operator requeues it, the flag once dismissed, the lapse once the task is held
again or done."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from attention_kit import action_urls, attention_items, cli_attention_items
from jobs_kit import REPO, Worker, pools, push_kernels, result_record, timing, trial
from monitor_ui_kit import MonitorUiGateway
from ui_kit import ui_plugins

from gateway.jobs.plugin import JobsPlugin
from gateway.jobs.settings import JobsSettings
from gateway.monitor.plugin import MonitorPlugin
from gateway.monitor.settings import MonitorSettings
from gateway.plugin import Plugin
from gateway.search.plugin import SearchPlugin
from gateway.tasks.models import TasksSettings
from gateway.tasks.plugin import TasksPlugin
from kstest.waiting import wait_for

SOFTMAX = "kernels/softmax/softmax_rowwise.py"
CLAIM_TTL_S = 3.0


class ReclaimingGateway(MonitorUiGateway):
    """The monitor and the real job runner and task board, paced for a test: a silent worker's job is
    reclaimed after 1 s and dead-lettered at its first reclaim (cpu: one attempt); a claim lapses after
    ``CLAIM_TTL_S`` unless renewed (heartbeats renew nothing here)."""

    def plugins(self) -> list[Plugin[Any]]:
        one_try = [p.model_copy(update={"max_attempts": 1}) if p.name == "cpu" else p for p in pools()]
        jobs = JobsPlugin(JobsSettings(pools_file=None, pools=one_try, claim_idle_s=1.0, reclaim_every_s=0.3))
        # done on the claimant's word: what is watched here is the claim's life, not the merge rule
        # (tests/gateway/forge/test_forge_task_done.py)
        rules = {"renew_on_heartbeat": False, "done_needs_merged_pr": False}
        tasks = TasksPlugin(TasksSettings(claim_ttl_s=CLAIM_TTL_S, sweep_s=0.3, **rules))
        monitor = MonitorPlugin(
            MonitorSettings(stall_after_s=60, attention_every_s=0.3, sample_s=0.3, pr_blocked_after_s=600)
        )
        return ui_plugins(jobs, tasks, monitor, SearchPlugin())


def gateway(clean_redis: str, short_tmp: Path) -> ReclaimingGateway:
    gw = ReclaimingGateway(short_tmp / "home", clean_redis)
    gw.start()
    return gw


def submit(gw: ReclaimingGateway, token: str, ref: str, **body: Any) -> str:
    with gw.client(token) as agent:
        reply = agent.post(
            "/api/jobs", json={"repo": REPO, "task": "softmax", "kernel": SOFTMAX, "ref": ref, **body}
        )
    assert reply.status_code == 201, reply.text
    return str(reply.json()["id"])


@pytest.mark.slow
def test_a_dead_letter_and_a_flagged_speedup_until_requeued_and_dismissed(
    clean_redis: str, short_tmp: Path
) -> None:
    gw = gateway(clean_redis, short_tmp)
    try:
        dev, w_cpu, w_gpu = (
            gw.add_principal("dev-1"),
            gw.add_principal("w-cpu", "worker"),
            gw.add_principal("w-gpu", "worker"),
        )
        ref = push_kernels(gw, short_tmp, dev, "dev-1")
        # A worker takes a cpu job, then dies without a word: reclaimed, and with one attempt, dead.
        lost = submit(gw, dev, ref, pool="cpu")
        assert Worker(gw, w_cpu).take("cpu", "local", [0, 1])[0] == lost
        dead = wait_for(lambda: attention_items(gw).get(f"dead:cpu:{lost}"), 30, "the dead letter listed")
        assert dead["severity"] == "critical" and dead["link"] == f"/ui/jobs/{lost}", dead
        assert (
            dead["title"] == f"job {lost} dead-lettered in cpu"
            and "dead-lettered after 1 attempts" in (dead["reason"])
        )
        assert set(action_urls(dead)) == {"Requeue", "Dismiss"}
        # A bench job 14x over eager: it passes, and the harness asks for a human look.
        fast = submit(gw, dev, ref, pool="gpu-h100", devices=2, kind="bench")
        gpu = Worker(gw, w_gpu)
        job, attempt = gpu.take("gpu-h100", "node0", list(range(8)))
        assert job == fast
        result = result_record(
            "softmax",
            SOFTMAX,
            "cuda",
            "pass",
            trials=[trial(0, True)],
            timings=[timing(65536, 0.010, 0.140)],
            flags=["suspicious_speedup"],
            needs_review=True,
        )
        gpu.finish(job, attempt, "pass", result, "verdict: pass (suspicious speedup)\n")
        flagged = wait_for(lambda: attention_items(gw).get(f"review:{fast}"), 20, "the flagged speedup")
        assert flagged["kind"] == "review" and flagged["link"] == f"/ui/jobs/{fast}", flagged
        assert "suspicious_speedup" in flagged["reason"] and "dev-1" in flagged["title"]
        assert action_urls(flagged) == {"Dismiss": f"/ui/api/attention/review:{fast}/ack"}
        from_cli = cli_attention_items(gw, short_tmp)
        assert from_cli[f"dead:cpu:{lost}"]["reason"] == dead["reason"]
        assert from_cli[f"review:{fast}"]["reason"] == flagged["reason"]

        with gw.login() as browser:
            page = browser.get("/ui/attention", headers={"Accept": "text/html"}).text
            assert f'data-key="dead:cpu:{lost}"' in page and f'data-key="review:{fast}"' in page
            csrf = {"X-CSRF-Token": browser.csrf}
            # Requeued from the item's action: a new job, and the dead letter is no longer the operator's.
            requeued = browser.post(action_urls(dead)["Requeue"], headers=csrf)
            assert requeued.status_code == 200, requeued.text
            assert requeued.json()["data"]["requeued"] == lost
            # Dismissed: the flag leaves the list (it was looked at).
            assert browser.post(action_urls(flagged)["Dismiss"], headers=csrf).status_code == 200
        after = attention_items(gw)
        assert f"dead:cpu:{lost}" not in after and f"review:{fast}" not in after, sorted(after)
        assert f"dead:cpu:{lost}" not in cli_attention_items(gw, short_tmp)
        # The requeued job waits on cpu, which nobody serves now: that is listed instead.
        assert after["pool:cpu"]["severity"] == "critical"
    finally:
        gw.stop()


@pytest.mark.slow
def test_a_lapsed_claim_until_the_task_is_held_again_and_done(clean_redis: str, short_tmp: Path) -> None:
    gw = gateway(clean_redis, short_tmp)
    try:
        dev1, dev2 = gw.add_principal("dev-1"), gw.add_principal("dev-2")
        with gw.client(gw.operator_token) as op:
            assert op.post("/api/tasks", json={"id": "softmax", "title": "Softmax"}).status_code == 201
        with gw.client(dev1) as agent:
            assert agent.post("/api/tasks/softmax/claim").status_code == 200  # and never renewed

        def lapsed() -> dict | None:
            return next((i for i in attention_items(gw).values() if i["kind"] == "claim"), None)

        claim = wait_for(lapsed, 30, "the lapsed claim listed")
        assert claim["title"] == "dev-1's claim on task softmax lapsed" and claim["subject"] == "softmax"
        assert claim["link"] == "/ui/tasks" and "not renewed" in claim["reason"], claim
        assert action_urls(claim) == {"Dismiss": f"/ui/api/attention/{claim['key']}/ack"}
        assert claim["key"] in cli_attention_items(gw, short_tmp)
        with gw.login() as browser:
            assert f'data-key="{claim["key"]}"' in browser.get("/ui/attention").text
        # dev-2 takes the task: nobody needs to act on the lapse any more.
        with gw.client(dev2) as agent:
            assert agent.post("/api/tasks/softmax/claim").status_code == 200
            assert claim["key"] not in attention_items(gw)

            def dev2_window_open() -> bool:  # renewed meanwhile: the feeder samples, the lease runs
                assert agent.post("/api/tasks/softmax/renew").status_code == 200
                return any(c["agent"] == "dev-2" for c in claims(gw))

            wait_for(dev2_window_open, 20, "the monitor saw dev-2's claim")
            assert agent.post("/api/tasks/softmax/done", json={"result": "PR #1 merged"}).status_code == 200
        # Done: the old lapse stays resolved (the feeder closes dev-2's window as done meanwhile).
        wait_for(
            lambda: any(c["how"] == "done" for c in claims(gw)), 20, "dev-2's claim window closed as done"
        )
        assert not [i for i in attention_items(gw).values() if i["kind"] == "claim"]
        assert not [k for k in cli_attention_items(gw, short_tmp) if k.startswith("claim:")]
    finally:
        gw.stop()


def claims(gw: ReclaimingGateway) -> list[dict[str, Any]]:
    with gw.client(gw.operator_token) as op:
        reply = op.get("/api/monitor/claims", params={"task": "softmax"})
    assert reply.status_code == 200, reply.text
    return list(reply.json())
