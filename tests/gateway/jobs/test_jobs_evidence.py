"""Evidence levels through the job runner's wire (issue 22 principle 6): the gateway derives them.

Attacks: an agent naming a level in its submission, a worker naming one beside its result, and a
worker whose result record claims ``device-verified`` for a job the cpu pool ran. The level recorded
(the job, and the verification record the gate binds) comes from the pool the job was submitted to and
the verdict; the record's own claim can only lower it. Before this change the gateway carried no level
at all (the gate read every pass as "verified"), so there was nothing to forge; the naive way to add
one, reading ``result["evidence"]``, is exactly what these tests refuse.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import redis as redis_sync

from gateway.forge import keys as forge_keys
from kstest.jobkit import JobsGateway

REPO = "kswarm/kernels"
FORGED = {
    "verdict": "pass",
    "evidence": "device-verified",
    "pool": "cuda",
    "trials": [{"index": 0, "device_shape": True, "ok": True}],
}


def submit(gw: JobsGateway, kernel: str, sha: str, **extra: Any) -> Any:
    with gw.as_("alice") as alice:
        return alice.post("/api/jobs", json={"kernel": kernel, "ref": sha, "repo": REPO, **extra})


def take(gw: JobsGateway, worker: str, pool: str, node: str, devices: int) -> dict[str, Any]:
    body = {
        "instance": "i1",
        "node": node,
        "free_devices": devices,
        "free_ids": [str(d) for d in range(devices)],
    }
    with gw.as_(worker) as w:
        reply = w.post(f"/api/jobs/pools/{pool}/take", json={**body, "wait_s": 5})
    assert reply.status_code == 200, reply.text
    return reply.json()


def finish(gw: JobsGateway, worker: str, taken: dict[str, Any], **body: Any) -> Any:
    request = {"instance": "i1", "attempt": taken["attempt"], "state": "succeeded", "verdict": "pass", **body}
    with gw.as_(worker) as w:
        return w.post(f"/api/jobs/{taken['job']['id']}/finish", json=request)


def recorded(gw: JobsGateway, sha: str, job_id: str) -> dict[str, Any]:
    """The verification record the gate binds, as the job runner wrote it."""
    client = redis_sync.Redis.from_url(gw.redis_url, decode_responses=True)
    try:
        raw = client.hget(forge_keys.verifications(REPO, sha), job_id)
    finally:
        client.close()
    assert raw, "no verification record"
    return dict(json.loads(str(raw)))


def job_view(gw: JobsGateway, job_id: str) -> dict[str, Any]:
    with gw.as_("alice") as alice:
        reply = alice.get(f"/api/jobs/{job_id}")
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def test_a_cpu_pool_job_can_never_claim_device_verified(
    jobs_gw: JobsGateway, kernels: Callable[..., str]
) -> None:
    kernel = "kernels/add/alice_claims.py"
    sha = kernels({kernel: "k\n"})
    # The agent cannot name a level: a submission field that does not exist is refused.
    refused = submit(jobs_gw, kernel, sha, evidence="device-verified")
    assert refused.status_code == 422, refused.text
    job = submit(jobs_gw, kernel, sha)
    assert job.status_code == 201, job.text
    taken = take(jobs_gw, "w1", "cpu", "local", 1)
    assert taken["job"]["id"] == job.json()["id"]
    # Nor can the worker, beside its result...
    beside = finish(jobs_gw, "w1", taken, evidence="device-verified", result=FORGED)
    assert beside.status_code == 422, beside.text
    # ...and inside it, a cpu pool's claim above what the interpreter can prove is not trusted at all.
    reply = finish(jobs_gw, "w1", taken, result=FORGED)
    assert reply.status_code == 200 and reply.json()["recorded"], reply.text
    view = job_view(jobs_gw, taken["job"]["id"])
    assert view["evidence"] == "cpu-shapes-only"
    assert view["result"]["evidence"] == "device-verified", "the worker's record is kept as it came"
    assert recorded(jobs_gw, sha, taken["job"]["id"])["evidence"] == "cpu-shapes-only"


def test_an_honest_record_keeps_its_level_up_to_the_pools_cap(
    jobs_gw: JobsGateway, kernels: Callable[..., str]
) -> None:
    kernel = "kernels/add/alice_honest.py"
    sha = kernels({kernel: "k\n"})
    # cpu: a screened record (a passing device-shape trial backs it) is cpu-screened.
    assert submit(jobs_gw, kernel, sha).status_code == 201
    cpu = take(jobs_gw, "w1", "cpu", "local", 1)
    screened = {**FORGED, "evidence": "cpu-screened", "pool": "cpu"}
    assert finish(jobs_gw, "w1", cpu, result=screened).json()["recorded"]
    assert job_view(jobs_gw, cpu["job"]["id"])["evidence"] == "cpu-screened"
    # npu: the device pool's pass is device-verified; a record without a level reads the same.
    assert submit(jobs_gw, kernel, sha, pool="npu-910c", devices=8).status_code == 201
    npu = take(jobs_gw, "w2", "npu-910c", "n0", 8)
    assert finish(jobs_gw, "w2", npu, result={"verdict": "pass"}).json()["recorded"]
    assert job_view(jobs_gw, npu["job"]["id"])["evidence"] == "device-verified"
    assert recorded(jobs_gw, sha, npu["job"]["id"])["evidence"] == "device-verified"
    # A failure proves nothing right, whatever its record says.
    assert submit(jobs_gw, kernel, sha).status_code == 201
    bad = take(jobs_gw, "w1", "cpu", "local", 1)
    reply = finish(jobs_gw, "w1", bad, state="failed", verdict="fail", result={**FORGED, "verdict": "fail"})
    assert reply.json()["recorded"]
    assert job_view(jobs_gw, bad["job"]["id"])["evidence"] == "none"
