"""End to end through the gateway: agents submit, worker processes run, results come back once."""

from __future__ import annotations

import re
import socket
import time

import pytest
import redis as redis_sync
from typer.testing import CliRunner

from gateway import keys as gateway_keys
from gateway.forge import keys as forge_keys
from gateway.forge.gate.evidence import Verification
from kstest.jobkit import CHEAT_ADD, HONEST_ADD, JobsGateway
from kstest.waiting import wait_for

FINAL = ("succeeded", "failed", "error", "timeout", "cancelled")


def inbox_texts(gw: JobsGateway, who: str) -> list[str]:
    with gw.as_(who) as c:
        return [i["text"] for i in c.get("/api/inbox", params={"peek": "true"}).json()["items"]]


def evidence(gw: JobsGateway, sha: str, repo: str = "kswarm/kernels") -> dict[str, Verification]:
    """The verification records the gateway keeps for ``sha`` (what the gate binds PRs to), by job id."""
    client = redis_sync.Redis.from_url(gw.redis_url, decode_responses=True)
    try:
        raw = client.hgetall(forge_keys.verifications(repo, sha))
    finally:
        client.close()
    return {job_id: Verification.model_validate_json(v) for job_id, v in raw.items()}


def evidence_states(gw: JobsGateway, job_id: str) -> list[str]:
    """Every state the job's verification record was written with, oldest first (from the forge's
    event stream, which the gate consumes)."""
    client = redis_sync.Redis.from_url(gw.redis_url, decode_responses=True)
    try:
        events = client.xrange(forge_keys.EVENTS)
    finally:
        client.close()
    return [f["state"] for _, f in events if f.get("type") == "verification" and f.get("job") == job_id]


def job_events(gw: JobsGateway, job_id: str) -> list[tuple[str, str]]:
    """(state, verdict) of each ``type=job`` entry the job put on the global event stream (what SSE
    clients and the UI's Jobs panel see)."""
    client = redis_sync.Redis.from_url(gw.redis_url, decode_responses=True)
    try:
        events = client.xrange(gateway_keys.EVENTS)
    finally:
        client.close()
    return [(f["state"], f["verdict"]) for _, f in events if f.get("type") == "job" and f["job"] == job_id]


def test_submit_run_report_and_cli(jobs_gw: JobsGateway, kernels, workers, monkeypatch) -> None:
    sha = kernels({"kernels/add/k.py": "# standin: verdict pass\n"})
    reply = jobs_gw.submit("alice", task="add", kernel="kernels/add/k.py", ref=kernels.branch)
    assert reply.status_code == 201, reply.text
    job = reply.json()
    assert job["submitter"] == "alice" and job["sha"] == sha and job["state"] == "queued"
    assert job["repo"] == "kswarm/kernels", "the only repo is the default"
    assert job["ref"] == kernels.branch, "the branch was resolved to its sha once, at submission"
    w = workers("cpu")
    done = jobs_gw.wait_job(job["id"], FINAL)
    assert done["state"] == "succeeded", (done["error"], w.output()[-3000:])
    with jobs_gw.as_("operator") as op:
        assert 'kswarm_jobs_finished_total{pool="cpu",state="succeeded"} 1.0' in op.get("/metrics").text
    assert done["verdict"] == "pass" and done["result"]["verdict"] == "pass" and done["attempts"] == 1
    assert done["node"] == "local" and done["allocated"] == ["0"]
    assert evidence_states(jobs_gw, job["id"]) == ["queued", "succeeded"]
    record = evidence(jobs_gw, sha)[job["id"]]
    assert (record.kernel, record.task, record.pool, record.outcome) == (
        "kernels/add/k.py",
        "add",
        "cpu",
        "pass",
    )
    assert job_events(jobs_gw, job["id"]) == [("queued", ""), ("running", ""), ("succeeded", "pass")]
    assert wait_for(lambda: [t for t in inbox_texts(jobs_gw, "alice") if job["id"] in t], what="notice")
    with jobs_gw.as_("alice") as c:
        log = c.get(f"/api/jobs/{job['id']}/logs").text
    assert "standin: pass" in log and "isolation: network: namespace" in log

    from orchestrator.cli.main import app

    monkeypatch.setenv("KSWARM_URL", jobs_gw.url)
    monkeypatch.setenv("KSWARM_TOKEN", jobs_gw.operator_token)
    monkeypatch.setenv("COLUMNS", "250")
    shown = CliRunner().invoke(app, ["jobs", "--pool", "cpu"])
    assert shown.exit_code == 0, shown.output
    assert "cpu" in shown.output and job["id"] in shown.output and "succeeded" in shown.output
    one = CliRunner().invoke(app, ["job", "show", job["id"], "--log"])
    assert one.exit_code == 0 and sha[:12] in one.output and "standin: pass" in one.output, one.output


def test_identity_comes_from_the_token(jobs_gw: JobsGateway, kernels) -> None:
    sha = kernels({"kernels/add/k.py": "# standin: verdict pass\n"})
    forged = jobs_gw.submit("alice", task="add", kernel="kernels/add/k.py", ref=sha, submitter="bob")
    assert forged.status_code == 422, "a submitter field is refused, not trusted"
    reply = jobs_gw.submit("alice", task="add", kernel="kernels/add/k.py", ref=sha, pool="cpu2")
    job_id = reply.json()["id"]
    assert reply.json()["submitter"] == "alice"
    with jobs_gw.as_("bob") as bob:
        assert bob.post(f"/api/jobs/{job_id}/cancel").status_code == 404, "not bob's to see, or cancel"
        take = bob.post(
            "/api/jobs/pools/cpu2/take", json={"instance": "x", "node": "local", "free_devices": 1}
        )
        assert take.status_code == 403, "agents do not take jobs"
        finish = bob.post(
            f"/api/jobs/{job_id}/finish", json={"instance": "x", "attempt": 1, "state": "succeeded"}
        )
        assert finish.status_code == 403
    with jobs_gw.as_("w1") as worker:
        body = {"task": "add", "kernel": "kernels/add/k.py", "ref": sha}
        assert worker.post("/api/jobs", json=body).status_code == 403, "workers do not submit"
    with jobs_gw.as_("alice") as alice:
        assert alice.post(f"/api/jobs/{job_id}/cancel").json()["state"] == "cancelled"
    missing = jobs_gw.submit("alice", task="add", kernel="kernels/add/none.py", ref=sha)
    assert missing.status_code == 404 and "no file kernels/add/none.py" in missing.json()["detail"]


def test_pool_rules_refuse_at_submission(jobs_gw: JobsGateway, kernels) -> None:
    sha = kernels({"kernels/add/k.py": "# standin: verdict pass\n"})
    four = jobs_gw.submit("alice", task="add", kernel="kernels/add/k.py", ref=sha, pool="npu-910c", devices=4)
    assert four.status_code == 422
    assert "allowed_device_counts" in four.json()["detail"] and "exactly 8" in four.json()["detail"]
    two_nodes = jobs_gw.submit(
        "alice", task="add", kernel="kernels/add/k.py", ref=sha, pool="npu-910c", nodes=2
    )
    assert two_nodes.status_code == 422 and "single_node" in two_nodes.json()["detail"]
    bench = jobs_gw.submit("alice", task="add", kernel="kernels/add/k.py", ref=sha, kind="bench")
    assert bench.status_code == 422 and "kinds" in bench.json()["detail"]
    eight = jobs_gw.submit(
        "alice", task="add", kernel="kernels/add/k.py", ref=sha, pool="npu-910c", devices=8
    )
    assert eight.status_code == 201 and eight.json()["devices"] == 8
    with jobs_gw.as_("operator") as op:
        pools = {p["pool"]: p for p in op.get("/api/jobs/pools").json()}
        assert pools["npu-910c"]["queued_by_agent"] == {"alice": 1}
        op.post(f"/api/jobs/{eight.json()['id']}/cancel")


def test_kill9_worker_mid_job_finishes_exactly_once(jobs_gw: JobsGateway, kernels, workers) -> None:
    sha = kernels({"kernels/add/k.py": "# standin: sleep 3\n# standin: verdict pass\n"})
    job_id = jobs_gw.submit("bob", task="add", kernel="kernels/add/k.py", ref=sha).json()["id"]

    def log() -> str:
        with jobs_gw.as_("operator") as op:
            return op.get(f"/api/jobs/{job_id}/logs").text

    first = workers("cpu", "w1")
    wait_for(lambda: "standin: candidate" in log(), timeout=60, what="the first attempt to start")
    assert jobs_gw.job(job_id)["state"] == "running"
    first.kill()  # SIGKILL: no goodbye, the job's entry stays pending under w1
    second = workers("cpu", "w2")
    done = jobs_gw.wait_job(job_id, FINAL, timeout=90)
    assert done["state"] == "succeeded", (done["error"], second.output()[-3000:])
    assert done["attempts"] == 2 and done["worker"].startswith("w2/"), log()[-3000:]
    text = log()
    assert text.count("standin: candidate") == 2, "at-least-once: the job started twice"
    assert text.count("standin: pass") == 1, "the killed attempt died with its worker"
    assert "attempt 1 lost: worker w1/" in text
    assert evidence_states(jobs_gw, job_id) == ["queued", "succeeded"], "evidence written once, at the end"
    # Bob submitted before any worker ran: he was told the job waits; then, once, how it finished.
    finished = wait_for(
        lambda: [t for t in inbox_texts(jobs_gw, "bob") if job_id in t and "waits for a worker" not in t],
        what="the finish notice",
    )
    assert len(finished) == 1 and "succeeded" in finished[0], finished
    with jobs_gw.as_("bob") as c:
        assert c.get("/api/jobs", params={"mine": "true", "state": "succeeded"}).json()[0]["id"] == job_id


def test_job_cannot_reach_the_network_or_lie(jobs_gw: JobsGateway, kernels, workers) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    try:
        sha = kernels(
            {
                "kernels/add/net.py": f"# standin: connect {port}\n# standin: verdict pass\n",
                "kernels/add/liar.py": "# standin: liar\n",
                "kernels/add/crash.py": "# standin: crash\n",
            }
        )
        ids = {
            name: jobs_gw.submit("alice", task="add", kernel=f"kernels/add/{name}.py", ref=sha).json()["id"]
            for name in ("net", "liar", "crash")
        }
        workers("cpu")
        net = jobs_gw.wait_job(ids["net"], FINAL)
        assert net["state"] == "succeeded" and net["result"]["connect"].startswith("failed"), net["result"]
        liar = jobs_gw.wait_job(ids["liar"], FINAL)
        assert liar["state"] == "error" and "disagrees with verdict 'pass'" in liar["error"]
        crash = jobs_gw.wait_job(ids["crash"], FINAL)
        assert crash["state"] == "error" and "without a readable result record" in crash["error"]
    finally:
        server.close()
    records = evidence(jobs_gw, sha)
    assert [records[ids[n]].outcome for n in ("liar", "crash")] == ["none", "none"], (
        "a lie or a crash never counts as a pass"
    )


def test_cancel_a_running_job(jobs_gw: JobsGateway, kernels, workers) -> None:
    sha = kernels({"kernels/add/k.py": "# standin: sleep 30\n"})
    job_id = jobs_gw.submit("alice", task="add", kernel="kernels/add/k.py", ref=sha).json()["id"]
    workers("cpu")
    jobs_gw.wait_job(job_id, ("running",))
    time.sleep(0.5)
    with jobs_gw.as_("alice") as c:
        assert c.post(f"/api/jobs/{job_id}/cancel").json()["cancel_requested"] is True
    done = jobs_gw.wait_job(job_id, FINAL, timeout=30)
    assert done["state"] == "cancelled"


@pytest.mark.slow
def test_real_harness_passes_honest_and_fails_cheating_kernel(jobs_gw: JobsGateway, kernels, workers) -> None:
    sha = kernels({"kernels/add/add_masked.py": HONEST_ADD, "kernels/add/cheat.py": CHEAT_ADD})
    honest = jobs_gw.submit("alice", task="add", kernel="kernels/add/add_masked.py", ref=sha, pool="cpu-real")
    cheat = jobs_gw.submit("bob", task="add", kernel="kernels/add/cheat.py", ref=sha, pool="cpu-real")
    assert honest.status_code == cheat.status_code == 201
    worker = workers("cpu-real")
    good = jobs_gw.wait_job(honest.json()["id"], FINAL, timeout=240)
    bad = jobs_gw.wait_job(cheat.json()["id"], FINAL, timeout=240)
    assert good["state"] == "succeeded", (good["error"], worker.output()[-3000:])
    assert good["result"]["schema_version"] == 2 and len(good["result"]["trials"]) >= 5
    assert good["result"]["environment"]["triton_interpret"] == "1"
    assert bad["state"] == "failed" and bad["verdict"] == "fail", bad["error"]
    assert bad["result"]["static_violations"] or bad["result"]["flags"]
    records = evidence(jobs_gw, sha)
    assert records[good["id"]].outcome == "pass" and records[bad["id"]].outcome == "fail"


@pytest.mark.slow
def test_each_job_takes_a_sandbox_started_before_it_and_never_one_another_job_had(
    jobs_gw: JobsGateway, kernels, workers
) -> None:
    """Warm starts (orchestrator/worker/warm.py, docs/jobs.md): the worker keeps one sandbox started
    ahead (torch and Triton imported, the fork server up); a job takes it, the next job gets a new one,
    and the verdicts are the cold start's. With ``--no-warm`` every job's sandbox starts with it."""
    sha = kernels({"kernels/add/add_masked.py": HONEST_ADD, "kernels/add/cheat.py": CHEAT_ADD})

    def run(kernel: str, want: str, worker) -> str:
        job = jobs_gw.submit("alice", task="add", kernel=kernel, ref=sha, pool="cpu-real").json()
        done = jobs_gw.wait_job(job["id"], FINAL, timeout=240)
        assert done["state"] == want, (done["error"], worker.output()[-3000:])
        with jobs_gw.as_("alice") as c:
            return c.get(f"/api/jobs/{job['id']}/logs").text

    worker = workers("cpu-real")
    logs = [
        run("kernels/add/add_masked.py", "succeeded", worker),
        run("kernels/add/cheat.py", "failed", worker),
    ]
    names = [re.search(r"warm start: sandbox ([0-9a-f]+), started before the job", log) for log in logs]
    assert all(names), logs[0][-2000:]
    assert names[0].group(1) != names[1].group(1)  # type: ignore[union-attr]
    worker.stop()
    cold = workers("cpu-real", "w1", "--no-warm")
    assert "warm start" not in run("kernels/add/add_masked.py", "succeeded", cold)


def test_reviewer_reproduction_runs_first_and_is_recorded(jobs_gw: JobsGateway, kernels, workers) -> None:
    sha = kernels({"kernels/add/k.py": "# standin: verdict pass\n"})
    with jobs_gw.gitea("alice") as api:
        pr = api.post(
            "/repos/kswarm/kernels/pulls", json={"head": kernels.branch, "base": "main", "title": "add"}
        )
    assert pr.status_code == 201, pr.text
    number = pr.json()["number"]
    own = jobs_gw.submit("alice", task="add", kernel="kernels/add/k.py", reproduce_pr=number)
    assert own.status_code == 422 and "reproduction_by_reviewer" in own.json()["detail"]
    normal = jobs_gw.submit("alice", task="add", kernel="kernels/add/k.py", ref=sha).json()
    repro = jobs_gw.submit("bob", task="add", kernel="kernels/add/k.py", reproduce_pr=number).json()
    assert repro["sha"] == sha and repro["priority"] == "reproduction", "the PR's head, with priority"
    workers("cpu")
    done = jobs_gw.wait_job(repro["id"], FINAL)
    later = jobs_gw.wait_job(normal["id"], FINAL)
    assert done["state"] == "succeeded" and done["started"] < later["started"], "the reproduction went first"
    record = evidence(jobs_gw, sha)[repro["id"]]
    assert (record.submitter, record.reproduce_pr, record.outcome) == ("bob", number, "pass")
