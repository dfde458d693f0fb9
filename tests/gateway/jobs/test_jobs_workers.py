"""A pool's workers as the gateway sees them: a worker principal per pool bound to that pool, live
workers from node leases, "no worker" in the pools listing, and the notice a job gets when nobody serves
its pool. Real gateway, Redis, git and worker processes."""

from __future__ import annotations

from typing import Any

import redis as redis_sync

from kstest.jobkit import JobsGateway, WorkerProc
from kstest.waiting import wait_for


def pools(gw: JobsGateway, who: str = "operator") -> dict[str, dict[str, Any]]:
    with gw.as_(who) as c:
        reply = c.get("/api/jobs/pools")
    assert reply.status_code == 200, reply.text
    return {p["pool"]: p for p in reply.json()}


def provision(gw: JobsGateway, pool: str, token: str | None = None) -> Any:
    with gw.client(token or gw.operator_token) as c:
        return c.post(f"/api/jobs/pools/{pool}/workers")


def inbox(gw: JobsGateway, who: str) -> list[dict[str, Any]]:
    with gw.as_(who) as c:
        return c.get("/api/inbox", params={"peek": "true"}).json()["items"]


def test_a_pool_without_a_live_worker_says_so_and_its_jobs_get_a_notice(
    jobs_gw: JobsGateway, kernels, workers
) -> None:
    before = pools(jobs_gw)["cpu"]
    assert before["no_worker"] is True and before["workers"] == [] and before["workers_expected"] == 1
    kernels({"kernels/add/k.py": "# standin: verdict pass\n"})
    queued = jobs_gw.submit("alice", kernel="kernels/add/k.py", ref=kernels.branch)
    assert queued.status_code == 201, queued.text
    job_id = queued.json()["id"]
    notices = [i for i in inbox(jobs_gw, "alice") if job_id in i["text"]]
    assert len(notices) == 1 and notices[0]["sender"] == "jobs" and notices[0]["reason"] == "dm"
    assert "waits for a worker: pool cpu has no live worker" in notices[0]["text"]

    proc = workers("cpu", "w1")
    live = wait_for(lambda: pools(jobs_gw)["cpu"]["workers"], 30, "the worker's node lease")
    assert [w["node"] for w in live] == ["local"] and live[0]["worker"].startswith("w1/")
    assert pools(jobs_gw)["cpu"]["no_worker"] is False
    jobs_gw.wait_job(job_id, ("succeeded",))  # the waiting job runs once a worker comes
    kernels({"kernels/add/k2.py": "# standin: verdict pass\n"})
    served = jobs_gw.submit("alice", kernel="kernels/add/k2.py", ref=kernels.branch).json()["id"]
    assert not [i for i in inbox(jobs_gw, "alice") if served in i["text"] and "waits" in i["text"]]

    proc.kill()  # kill -9: its lease lapses after claim_idle_s (5 s here), then the pool has none again
    wait_for(lambda: pools(jobs_gw)["cpu"]["no_worker"], 30, "the dead worker's lease to lapse")


def test_a_burst_of_jobs_in_a_pool_without_a_worker_gets_one_notice_per_submitter(
    jobs_gw: JobsGateway, kernels
) -> None:
    """Sixteen agents submitting a dozen jobs each to a pool nobody serves once made a DM per job: most
    were refused by the notice sender's rate limit, each with a warning. One per submitter and pool."""
    kernels({"kernels/add/k.py": "# standin: verdict pass\n"})
    for who in ("alice", "alice", "alice", "bob", "alice", "bob"):
        queued = jobs_gw.submit(who, kernel="kernels/add/k.py", ref=kernels.branch)
        assert queued.status_code == 201, queued.text
    for who in ("alice", "bob"):
        notices = [i for i in inbox(jobs_gw, who) if "waits for a worker" in i["text"]]
        assert len(notices) == 1, notices
        assert notices[0]["sender"] == "jobs" and "without another notice" in notices[0]["text"]


def test_a_pools_worker_token_serves_that_pool_only(jobs_gw: JobsGateway, kernels, workers) -> None:
    """Attack: the token `kswarm worker token cpu` printed for a CPU box is used to take another pool's
    jobs. Its principal is bound to its pool; the take is refused and the job stays queued."""
    granted = provision(jobs_gw, "cpu")
    assert granted.status_code == 200, granted.text
    body = granted.json()
    assert body["pool"] == "cpu" and body["principal"] == "worker-cpu" and body["token"].startswith("ksw_")
    kernels({"kernels/add/k.py": "# standin: verdict pass\n"})
    job = jobs_gw.submit("bob", kernel="kernels/add/k.py", ref=kernels.branch, pool="cpu2").json()
    take = {"instance": "thief", "node": "local", "free_devices": 1, "wait_s": 0}
    with jobs_gw.client(body["token"]) as thief:
        refused = thief.post("/api/jobs/pools/cpu2/take", json=take)
        assert refused.status_code == 403, refused.text
        assert "worker-cpu serves pool cpu only, not cpu2" in refused.json()["detail"]
        own = thief.post("/api/jobs/pools/cpu/take", json={**take, "node": "local"})
        assert own.status_code in (200, 204), own.text  # its own pool: served
    assert jobs_gw.job(job["id"])["state"] == "queued" and jobs_gw.job(job["id"])["worker"] is None

    # A real worker process with that token: it serves cpu, and a cpu2 job still waits.
    jobs_gw.tokens["worker-cpu"] = body["token"]
    proc = WorkerProc(jobs_gw, "cpu2", jobs_gw.home.parent / "w-bound", body["token"])
    try:
        wait_for(lambda: proc.proc.poll() is not None or "403" in proc.output(), 30, "the refusal")
        assert jobs_gw.job(job["id"])["state"] == "queued"
    finally:
        proc.kill()
    release = workers("cpu2", "w2")  # an unbound worker principal serves any pool
    jobs_gw.wait_job(job["id"], ("succeeded",))
    release.kill()


def test_only_operators_provision_workers(jobs_gw: JobsGateway) -> None:
    for who in ("alice", "w1"):
        reply = provision(jobs_gw, "cpu", jobs_gw.tokens[who])
        assert reply.status_code == 403, (who, reply.text)
    assert provision(jobs_gw, "nosuch").status_code == 404
    first, second = provision(jobs_gw, "cpu").json(), provision(jobs_gw, "cpu").json()
    assert first["token"] != second["token"]
    for token in (first["token"], second["token"]):  # a new token does not revoke the earlier one
        with jobs_gw.client(token) as c:
            assert c.get("/api/me").json()["name"] == "worker-cpu"
    client = redis_sync.Redis.from_url(jobs_gw.redis_url, decode_responses=True)
    try:  # tokens are kept as hashes only
        assert not any(first["token"] in str(client.get(k)) for k in client.scan_iter("ks:token:*"))
    finally:
        client.close()


def test_a_name_taken_by_an_agent_is_not_made_a_worker(jobs_gw: JobsGateway) -> None:
    jobs_gw.tokens["worker-cpu2"] = jobs_gw.add_principal("worker-cpu2", "agent")
    reply = provision(jobs_gw, "cpu2")
    assert (
        reply.status_code == 409
        and "exists as a principal of kind agent, not worker" in reply.json()["detail"]
    )
