"""Requeue is offered only when it can work (issue 24): a failed job whose commit a force-push made
unreachable is not offered a Requeue -- not on Attention, not on the job page, not by ``kswarm job
retry`` -- each says why and offers a resubmission at the head of the job's PR, which works.

Real components: the embedded forge (a real git repo, pushed and force-pushed with the git CLI), the real
job runner and monitor, the CLI in-process."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from attention_kit import action_urls, attention_items
from jobs_kit import REPO, Worker, push_kernels, result_record, trial
from monitor_ui_kit import MonitorUiGateway
from test_ui_jobs_cli import job, kswarm_job

from kstest.jobkit import git, git_home, work_tree
from kstest.waiting import wait_for

HTML = {"Accept": "text/html"}
ADD = "kernels/add/add_masked.py"


def failed_job(gw: MonitorUiGateway, agent: str, worker: str, ref: str) -> str:
    """A job of ``agent``'s at ``ref`` that its worker ends in error (the harness broke)."""
    with gw.client(agent) as dev:
        reply = dev.post(
            "/api/jobs", json={"repo": REPO, "task": "add", "kernel": ADD, "ref": ref, "pool": "cpu"}
        )
    assert reply.status_code == 201, reply.text
    job_id = reply.json()["id"]
    cpu = Worker(gw, worker)
    taken, attempt = cpu.take("cpu", "local", [0, 1])
    assert taken == job_id
    cpu.finish(
        job_id, attempt, "error", result_record("add", ADD, "cpu", "error", trials=[trial(0, True)]), ""
    )
    return job_id


def test_a_job_whose_commit_was_force_pushed_away_is_offered_its_prs_head(
    mon_ui: MonitorUiGateway, short_tmp: Path, tmp_path: Path
) -> None:
    gw, op = mon_ui, mon_ui.operator_token
    dev = gw.add_principal("dev-1")
    worker = gw.add_principal("w-cpu", "worker")
    branch = push_kernels(gw, short_tmp, dev, "dev-1")
    with httpx.Client(base_url=f"{gw.url}/api/v1", headers={"Authorization": f"token {dev}"}) as api:
        pr = api.post(f"/repos/{REPO}/pulls", json={"head": branch, "base": "main", "title": "add kernels"})
    assert pr.status_code == 201, pr.text
    number = pr.json()["number"]
    failed = failed_job(gw, dev, worker, branch)
    old_sha = job(gw, failed)["sha"]
    assert job(gw, failed)["state"] == "error"

    # While its commit is on the branch, Requeue is what the item offers.
    item = wait_for(lambda: attention_items(gw).get(f"job:{failed}"), 20, "the failed job on Attention")
    assert "Requeue" in action_urls(item), item

    # The agent rewrites its branch: the job's commit is now reachable from no ref.
    work, home = work_tree(short_tmp, "dev-1", branch), git_home(short_tmp, "dev-1")
    ident = (dev, "dev-1", f"dev-1@agents.{gw.swarm}")
    (work / ADD).write_text((work / ADD).read_text() + "\n# reworked\n")
    git(
        home,
        *ident,
        "commit",
        "-q",
        "-a",
        "--amend",
        "-m",
        "add kernels, reworked",
        cwd=work,
    )
    git(home, *ident, "push", "-q", "-f", "origin", branch, cwd=work)
    head = git(home, *ident, "rev-parse", "HEAD", cwd=work).strip()
    assert head != old_sha

    def resubmit_offered() -> dict | None:
        found = attention_items(gw).get(f"job:{failed}")
        return found if found and "Resubmit at PR head" in action_urls(found) else None

    item = wait_for(resubmit_offered, 20, "Attention to offer the PR's head instead of Requeue")
    assert "Requeue" not in action_urls(item)
    assert action_urls(item)["Resubmit at PR head"] == f"/ui/api/actions/jobs/{failed}/resubmit"
    assert "no longer reachable" in item["reason"] and f"{REPO}#{number}" in item["reason"], item
    assert head[:10] in item["reason"]

    with gw.login() as browser:
        page = browser.get(f"/ui/jobs/{failed}", headers=HTML).text
    assert 'id="job-requeue" disabled' in page and f"/ui/api/actions/jobs/{failed}/resubmit" in page
    assert 'id="job-requeue-why"' in page and "no longer reachable" in page

    # The CLI: retry is refused with the reason and what to run instead; --at-head runs at the PR's head.
    code, out, err = kswarm_job(gw, op, tmp_path, "retry", failed)
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1, (code, out, err)
    assert "no longer reachable" in err and f"kswarm job retry {failed} --at-head" in err, err
    with gw.client(op) as c:
        refused = c.post(f"/api/actions/jobs/{failed}/requeue")
    assert refused.status_code == 409 and "no longer reachable" in refused.json()["detail"], refused.text
    code, out, err = kswarm_job(gw, op, tmp_path, "retry", failed, "--at-head", "--json")
    assert code == 0, err
    again = job(gw, json.loads(out)["data"]["job"])
    assert again["sha"] == head and again["kernel"] == ADD and again["submitter"] == "operator"
    with gw.client(op) as c:
        audit = [(a["action"], a["target"], a["outcome"]) for a in c.get("/api/monitor/actions").json()]
    assert ("job:requeue", failed, "refused") in audit and ("job:resubmit", failed, "done") in audit
