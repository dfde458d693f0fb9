"""Trust at the seams, end to end: real git pushes, real job workers, the gate bot, the agents' tokens.

The attacks of issue "trust at the seams" as an agent would run them against a running gateway: the
two-kernel trick (a wrong softmax and a correct add in one PR, a passing job on add only), a job that
verifies a file "as" another task, another agent's job trying to flip my PR, a worker dying right
after ``finish``, and reading another agent's job.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis as redis_sync
from redis.asyncio import Redis

from gateway.client.jobs.models import JobState
from gateway.forge import keys as forge_keys
from gateway.forge.plugin import ForgePlugin
from gateway.forge.settings import ForgeSettings
from gateway.jobs.plugin import JobsPlugin
from gateway.jobs.queue import JobQueue
from gateway.jobs.settings import JobsSettings
from gateway.plugins import default_plugins, replace_plugins
from kstest.jobkit import JobsGateway, WorkerProc, git, push_kernels
from kstest.jobs_fixtures import pool_configs
from kstest.waiting import wait_for

FINAL = ("succeeded", "failed", "error", "timeout", "cancelled")
REPO = "kswarm/dataset"
SOFTMAX, ADD = "kernels/softmax/alice_triton.py", "kernels/add/alice_triton.py"


class GatedGateway(JobsGateway):
    """Forge with its gate bot (a fast sweep) and jobs, like ``kswarm up``'s gateway."""

    def plugins(self) -> list[Any]:
        forge = ForgePlugin(ForgeSettings(gate_sweep_s=1.0))
        return replace_plugins(default_plugins(), forge, JobsPlugin(self.jobs_settings))


@pytest.fixture(scope="module")
def gw(redis_url: str) -> Iterator[GatedGateway]:
    client = redis_sync.Redis.from_url(redis_url)
    client.flushall()
    client.close()
    tmp = Path(tempfile.mkdtemp(prefix="ksb"))
    gateway = GatedGateway(tmp / "home", redis_url)
    gateway.jobs_settings = JobsSettings(
        pools_file=None, pools=pool_configs(), claim_idle_s=5.0, reclaim_every_s=0.5
    )
    gateway.start()
    gateway.tokens = {n: gateway.add_principal(n) for n in ("alice", "bob", "carol", "mallory")}
    gateway.tokens.update({n: gateway.add_principal(n, "worker") for n in ("w1", "w2")})
    policy = {
        "required_approvals": 1,
        "required_checks": ["kswarm/verify:cpu"],
        "protected_branches": ["main"],
        "dataset": True,
    }
    with gateway.as_("operator") as op:
        assert op.post("/api/forge/repos", json={"org": "kswarm", "name": "dataset"}).status_code == 201
        assert op.put(f"/api/forge/repos/{REPO}/policy", json=policy).status_code == 200
    try:
        yield gateway
    finally:
        gateway.stop()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def worker(gw: GatedGateway, short_tmp: Path) -> Iterator[Callable[[], WorkerProc]]:
    started: list[WorkerProc] = []
    short_tmp.chmod(0o711)

    def start() -> WorkerProc:
        proc = WorkerProc(gw, "cpu", short_tmp / "workers", gw.tokens["w1"])
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()


def open_pr(gw: GatedGateway, who: str, branch: str, reviewers: tuple[str, ...] = ("bob",)) -> int:
    body = {"head": branch, "base": "main", "title": branch, "reviewers": list(reviewers)}
    with gw.gitea(who) as api:
        reply = api.post(f"/repos/{REPO}/pulls", json=body)
    assert reply.status_code == 201, reply.text
    return int(reply.json()["number"])


def approve(gw: GatedGateway, who: str, number: int) -> None:
    with gw.gitea(who) as api:
        reply = api.post(f"/repos/{REPO}/pulls/{number}/reviews", json={"event": "APPROVED"})
    assert reply.status_code == 200, reply.text


def view(gw: GatedGateway, number: int) -> dict[str, Any]:
    with gw.as_("operator") as op:
        reply = op.get(f"/api/forge/repos/{REPO}/pulls/{number}")
    assert reply.status_code == 200, reply.text
    return reply.json()


def statuses(gw: GatedGateway, sha: str) -> dict[str, str]:
    return {s["context"]: s["status"] for s in gw.statuses(REPO, sha)}


def submit(gw: GatedGateway, who: str, kernel: str, sha: str, **extra: Any) -> dict[str, Any]:
    reply = gw.submit(who, kernel=kernel, ref=sha, repo=REPO, **extra)
    assert reply.status_code == 201, reply.text
    return reply.json()


def test_the_two_kernel_trick_is_blocked_and_pr_why_names_the_kernel(
    gw: GatedGateway, worker: Callable[[], WorkerProc], short_tmp: Path
) -> None:
    files = {SOFTMAX: "# standin: verdict fail\n", ADD: "# standin: verdict pass\n"}
    sha = push_kernels(gw, short_tmp, REPO, "alice", "alice/softmax", files)
    number = open_pr(gw, "alice", "alice/softmax")
    approve(gw, "bob", number)
    # the mis-tasked job: verify the softmax file "as" add -> refused, saying why
    wrong = gw.submit("alice", task="add", kernel=SOFTMAX, ref=sha, repo=REPO)
    assert wrong.status_code == 422
    assert "disagrees with the kernel's path" in wrong.text and "'softmax'" in wrong.text
    # the trick: a passing job on add only, at the head
    worker()
    done = gw.wait_job(submit(gw, "alice", ADD, sha)["id"], FINAL)
    assert done["state"] == "succeeded" and done["task"] == "add"
    wait_for(lambda: statuses(gw, sha).get("kswarm/verify:cpu/add/alice_triton.py") == "success")
    assert statuses(gw, sha)["kswarm/verify:cpu"] == "pending", "1 of 2 kernels is not the aggregate"
    gate = view(gw, number)["gate"]
    assert not gate["mergeable"] and not view(gw, number)["state"] == "merged"
    missing = [r["message"] for r in gate["reasons"] if r["code"] == "kernel-unverified"]
    assert len(missing) == 1 and missing[0].startswith(f"{SOFTMAX} on kswarm/verify:cpu")
    # verifying the wrong kernel fails it: the PR is blocked for good on this head
    gw.wait_job(submit(gw, "alice", SOFTMAX, sha)["id"], FINAL)
    wait_for(lambda: statuses(gw, sha).get("kswarm/verify:cpu") == "failure", what="the aggregate to fail")
    assert {r["code"] for r in view(gw, number)["gate"]["reasons"]} == {"kernel-failed"}
    time.sleep(1.5)  # a sweep later, still not merged
    assert view(gw, number)["state"] == "open"


def test_another_agents_job_cannot_flip_my_pr(
    gw: GatedGateway, worker: Callable[[], WorkerProc], short_tmp: Path
) -> None:
    kernel = "kernels/add/alice_slow.py"
    sha = push_kernels(gw, short_tmp, REPO, "alice", "alice/slow", {kernel: "# standin: sleep 2\n"})
    number = open_pr(gw, "alice", "alice/slow")
    worker()
    # mallory runs alice's kernel with a timeout it cannot meet, and cancels another: nothing is proven
    starved = submit(gw, "mallory", kernel, sha, timeout_s=1)
    cancelled = submit(gw, "mallory", kernel, sha)
    with gw.as_("mallory") as c:
        assert c.post(f"/api/jobs/{cancelled['id']}/cancel").status_code == 200
    assert gw.wait_job(starved["id"], FINAL)["state"] == "timeout"
    gate = view(gw, number)["gate"]
    assert {r["code"] for r in gate["reasons"]} == {"kernel-unverified", "approvals"}
    jobs = {j["id"]: j["counts"] for k in gate["kernels"] for c in k["checks"] for j in c["jobs"]}
    assert jobs == {starved["id"]: False, cancelled["id"]: False}
    # alice's own passing job and bob's approval merge it
    gw.wait_job(submit(gw, "alice", kernel, sha)["id"], FINAL)
    approve(gw, "bob", number)
    wait_for(lambda: view(gw, number)["state"] == "merged", timeout=30, what="the merge")


def test_a_worker_dying_right_after_finish_loses_nothing(gw: GatedGateway, short_tmp: Path) -> None:
    """The worker's finish is its only call: evidence, statuses and the notice follow from the gateway,
    exactly once, even though this 'worker' never makes another call."""
    kernel = "kernels/add/alice_once.py"
    sha = push_kernels(gw, short_tmp, REPO, "alice", "alice/once", {kernel: "k\n"})
    number = open_pr(gw, "alice", "alice/once")
    job = submit(gw, "alice", kernel, sha)
    with gw.as_("w2") as w:
        taken = take(w)
        assert taken.json()["job"]["id"] == job["id"]
        # An honest cpu-screened record (the default policy's minimum; docs/verification.md).
        result = {
            "verdict": "pass",
            "evidence": "cpu-screened",
            "trials": [{"device_shape": True, "ok": True}],
        }
        finish = {"instance": "dies", "attempt": 1, "state": "succeeded", "verdict": "pass", "result": result}
        assert w.post(f"/api/jobs/{job['id']}/finish", json=finish).json()["recorded"] is True
    # ...and the worker is gone. The gateway did the rest.
    wait_for(lambda: statuses(gw, sha).get("kswarm/verify:cpu") == "success", what="the aggregate status")
    time.sleep(2.0)  # several reclaim passes: nothing is delivered twice
    # The job's final notice, exactly once (a loaded machine may also tell alice first that the job
    # waited for a worker: a notice of its own, about the queue, not about this outcome).
    notices = [t for t in inbox(gw, "alice") if job["id"] in t and "waits for a worker" not in t]
    assert len(notices) == 1 and "succeeded" in notices[0]
    assert verification_states(gw, job["id"]) == ["queued", "succeeded"]
    assert [k["checks"][0]["state"] for k in view(gw, number)["gate"]["kernels"]] == ["success"]


def test_a_gateway_crash_between_record_and_delivery_is_healed(gw: GatedGateway, short_tmp: Path) -> None:
    """The queue's finish script lists the job as unreported atomically with its final state; if the
    gateway dies before delivering (simulated: the script runs, the delivery does not), the reclaim
    loop delivers it."""
    kernel = "kernels/add/alice_crash.py"
    sha = push_kernels(gw, short_tmp, REPO, "alice", "alice/crash", {kernel: "k\n"})
    job = submit(gw, "alice", kernel, sha)
    with gw.as_("w2") as w:
        assert take(w).json()["job"]["id"] == job["id"]

    async def finish_without_delivery() -> bool:
        redis = Redis.from_url(gw.redis_url, decode_responses=True)
        try:
            recorded, _ = await JobQueue(redis).finish(
                job["id"], "w2/dies", 1, JobState.failed, verdict="fail"
            )
            return recorded
        finally:
            await redis.aclose()

    assert asyncio.run(finish_without_delivery())
    assert verification_states(gw, job["id"]) == ["queued"]
    wait_for(lambda: verification_states(gw, job["id"]) == ["queued", "failed"], timeout=20, what="delivery")
    assert wait_for(lambda: [t for t in inbox(gw, "alice") if job["id"] in t], what="the notice")


def test_jobs_are_read_only_by_those_in_the_work(gw: GatedGateway, short_tmp: Path) -> None:
    kernel = "kernels/add/alice_secret.py"
    sha = push_kernels(gw, short_tmp, REPO, "alice", "alice/secret", {kernel: "k\n"})
    number = open_pr(gw, "alice", "alice/secret", reviewers=("bob",))
    job = submit(gw, "alice", kernel, sha)
    # mallory opens her own PR at alice's commit, hoping to become "the PR's author"
    home, work = short_tmp / "gh-mallory", short_tmp / "gw-mallory-peek"
    home.mkdir(parents=True, exist_ok=True)
    ident = (gw.tokens["mallory"], "mallory", f"mallory@agents.{gw.swarm}")
    git(home, *ident, "clone", "-q", f"{gw.url}/git/{REPO}.git", str(work))
    git(home, *ident, "fetch", "-q", "origin", "alice/secret", cwd=work)
    git(home, *ident, "push", "-q", "origin", f"{sha}:refs/heads/mallory/peek", cwd=work)
    peek = open_pr(gw, "mallory", "mallory/peek", reviewers=())
    assert view(gw, peek)["head_sha"] == sha
    for who, code in (("alice", 200), ("bob", 200), ("mallory", 404), ("w1", 200), ("operator", 200)):
        with gw.as_(who) as c:
            assert c.get(f"/api/jobs/{job['id']}").status_code == code, who
            assert c.get(f"/api/jobs/{job['id']}/logs").status_code == code, who
            listed = {j["id"] for j in c.get("/api/jobs", params={"limit": 500}).json()}
            assert (job["id"] in listed) == (code == 200), who
            pools = c.get("/api/jobs/pools").json()
            seen = {j["id"] for p in pools for j in p["recent"] + p["running_jobs"]}
            assert job["id"] not in seen or code == 200, who
    assert number


def test_self_nomination_grants_no_access_to_a_prs_jobs(gw: GatedGateway, short_tmp: Path) -> None:
    """mallory adds herself to alice's reviewers and posts a one-line COMMENT review: neither makes
    her a participant, so alice's job record and log stay 404 to her (bob, whom alice asked, reads)."""
    kernel = "kernels/add/alice_nominated.py"
    sha = push_kernels(gw, short_tmp, REPO, "alice", "alice/nominated", {kernel: "k\n"})
    number = open_pr(gw, "alice", "alice/nominated", reviewers=("bob",))
    job = submit(gw, "alice", kernel, sha)
    with gw.gitea("mallory") as api:
        asked = api.post(f"/repos/{REPO}/pulls/{number}/requested_reviewers", json={"reviewers": ["mallory"]})
        assert asked.status_code == 403, asked.text
        assert "author" in asked.json()["message"]
        commented = api.post(f"/repos/{REPO}/pulls/{number}/reviews", json={"event": "COMMENT", "body": "hi"})
        assert commented.status_code == 200, commented.text  # commenting stays open to everyone
    assert view(gw, number)["requested_reviewers"] == ["bob"]
    for who, code in (("mallory", 404), ("bob", 200), ("operator", 200)):
        with gw.as_(who) as c:
            assert c.get(f"/api/jobs/{job['id']}").status_code == code, who
            assert c.get(f"/api/jobs/{job['id']}/logs").status_code == code, who
    # the author may still ask someone else, and that one then reads the job
    with gw.gitea("alice") as api:
        asked = api.post(f"/repos/{REPO}/pulls/{number}/requested_reviewers", json={"reviewers": ["carol"]})
        assert asked.status_code == 201, asked.text
    with gw.as_("carol") as c:
        assert c.get(f"/api/jobs/{job['id']}").status_code == 200


def test_a_lead_may_request_reviewers_on_anothers_pr(gw: GatedGateway, short_tmp: Path) -> None:
    """The lead (made one by the operator on the task board) may ask reviewers onto alice's PR, who then
    read its jobs; once no longer a lead, the same request is refused like anyone's."""
    kernel = "kernels/add/alice_led.py"
    sha = push_kernels(gw, short_tmp, REPO, "alice", "alice/led", {kernel: "k\n"})
    number = open_pr(gw, "alice", "alice/led", reviewers=("bob",))
    job = submit(gw, "alice", kernel, sha)
    url = f"/repos/{REPO}/pulls/{number}/requested_reviewers"
    with gw.as_("operator") as op:
        assert op.put("/api/tasks/leads/mallory").status_code == 204
    try:
        with gw.gitea("mallory") as api:
            asked = api.post(url, json={"reviewers": ["carol"]})
            assert asked.status_code == 201, asked.text
        with gw.as_("carol") as c:
            assert c.get(f"/api/jobs/{job['id']}").status_code == 200
    finally:
        with gw.as_("operator") as op:
            assert op.delete("/api/tasks/leads/mallory").status_code == 204
    with gw.gitea("mallory") as api:
        refused = api.post(url, json={"reviewers": ["mallory"]})
        assert refused.status_code == 403 and "a lead agent" in refused.json()["message"], refused.text


def test_a_review_by_someone_not_asked_grants_no_access(gw: GatedGateway, short_tmp: Path) -> None:
    """Anyone may review (a COMMENT, even an approval): none of it opens the author's evidence."""
    kernel = "kernels/add/alice_reviewed.py"
    sha = push_kernels(gw, short_tmp, REPO, "alice", "alice/reviewed", {kernel: "k\n"})
    number = open_pr(gw, "alice", "alice/reviewed", reviewers=("bob",))
    job = submit(gw, "alice", kernel, sha)
    for event in ("COMMENT", "REQUEST_CHANGES"):
        with gw.gitea("mallory") as api:
            reply = api.post(f"/repos/{REPO}/pulls/{number}/reviews", json={"event": event, "body": "lgtm?"})
            assert reply.status_code == 200, reply.text
        with gw.as_("mallory") as c:
            assert c.get(f"/api/jobs/{job['id']}").status_code == 404, event
            assert c.get(f"/api/jobs/{job['id']}/logs").status_code == 404, event


def take(worker: httpx.Client) -> httpx.Response:
    """Take the next cpu job as worker instance ``dies``, waiting out an earlier worker's node lease."""
    body = {"instance": "dies", "node": "local", "free_devices": 1, "free_ids": ["0"], "wait_s": 5}
    deadline = time.monotonic() + 30
    while True:
        reply = worker.post("/api/jobs/pools/cpu/take", json=body)
        if reply.status_code != 409 or time.monotonic() > deadline:
            assert reply.status_code == 200, reply.text
            return reply
        time.sleep(0.5)


def inbox(gw: GatedGateway, who: str) -> list[str]:
    with gw.as_(who) as c:
        return [i["text"] for i in c.get("/api/inbox", params={"peek": "true"}).json()["items"]]


def verification_states(gw: GatedGateway, job_id: str) -> list[str]:
    client = redis_sync.Redis.from_url(gw.redis_url, decode_responses=True)
    try:
        events = client.xrange(forge_keys.EVENTS)
    finally:
        client.close()
    return [f["state"] for _, f in events if f.get("type") == "verification" and f.get("job") == job_id]
