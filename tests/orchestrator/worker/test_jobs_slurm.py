"""The Slurm path against a real single-node slurm-wlm with 8 fake GPUs (character devices)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from gateway.client.jobs.pools import JobLimits
from kstest.jobkit import HERE, JobsGateway
from orchestrator.worker.executors.base import ExecSpec, job_env
from orchestrator.worker.executors.local import make_writable
from orchestrator.worker.executors.slurm import SlurmExecutor

pytestmark = pytest.mark.slurm


def test_sbatch_gres_gpu8_sets_cuda_visible_devices(slurm: str, short_tmp: Path) -> None:
    short_tmp.chmod(0o711)
    src, out = short_tmp / "src", short_tmp / "out"
    src.mkdir()
    out.mkdir()
    (src / "k.py").write_text("# standin: verdict pass\n")
    argv = [sys.executable, str(HERE / "standin_harness.py"), "--candidate", str(src / "k.py")]
    argv += ["--out", str(out / "result.json")]
    spec = ExecSpec(
        job_id="jslurm",
        attempt=1,
        argv=argv,
        checkout=src,
        outdir=out,
        env=job_env(out),
        timeout_s=60,
        limits=JobLimits(),
        device="cuda",
        device_count=8,
        gres="gpu",
    )
    try:
        outcome = asyncio.run(SlurmExecutor(poll_s=0.2).run(spec, asyncio.Event()))
    finally:
        make_writable(src)
    assert outcome.returncode == 0, (outcome, (out / "slurm.out").read_text())
    record = json.loads((out / "result.json").read_text())
    assert record["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert record["env"]["SLURM_JOB_ID"] == outcome.detail["slurm_job"]
    if os.geteuid() == 0:
        assert record["uid"] == 65534 and "[kswarm] sandbox: network, mount" in outcome.output
    assert outcome.detail["slurm_state"] in ("COMPLETED", "UNKNOWN")
    assert "standin: pass" in outcome.output


def log_of(gw: JobsGateway, job_id: str) -> str:
    with gw.as_("operator") as op:
        return op.get(f"/api/jobs/{job_id}/logs").text


def test_a_slurm_job_is_sandboxed_like_a_local_one(slurm: str, short_tmp: Path) -> None:
    """The attack of a job on a cluster node: write its checkout and the host's /tmp. Both fail in
    the sandbox the batch script enters (before, the Slurm path ran under its own weaker wrapper)."""
    short_tmp.chmod(0o711)
    src, out = short_tmp / "src", short_tmp / "out"
    src.mkdir()
    out.mkdir()
    marker = Path("/tmp") / f"kswarm-slurm-escape-{os.getpid()}"
    (src / "k.py").write_text(f"# standin: write\n# standin: marker {marker}\n# standin: verdict pass\n")
    argv = [sys.executable, str(HERE / "standin_harness.py"), "--candidate", str(src / "k.py")]
    argv += ["--out", str(out / "result.json")]
    spec = ExecSpec(
        job_id="jslurm2", attempt=1, argv=argv, checkout=src, outdir=out, env=job_env(out),
        timeout_s=60, limits=JobLimits(), device="cpu", device_count=0, gres=None,
    )  # fmt: skip
    try:
        outcome = asyncio.run(SlurmExecutor(poll_s=0.2).run(spec, asyncio.Event()))
    finally:
        make_writable(src)
    assert outcome.returncode == 0, (outcome, (out / "slurm.out").read_text())
    record = json.loads((out / "result.json").read_text())
    assert record["write"].startswith("failed"), record
    assert (src / "k.py").read_text().startswith("# standin: write")
    assert not marker.exists(), "the job wrote the host's /tmp"


def test_slurm_pool_end_to_end(slurm: str, jobs_gw: JobsGateway, kernels, workers) -> None:
    sha = kernels({"kernels/add/k.py": "# standin: verdict pass\n"})
    too_few = jobs_gw.submit(
        "bob", task="add", kernel="kernels/add/k.py", ref=sha, pool="gpu-slurm", devices=4
    )
    assert too_few.status_code == 422 and "allowed_device_counts" in too_few.json()["detail"]
    reply = jobs_gw.submit("bob", task="add", kernel="kernels/add/k.py", ref=sha, pool="gpu-slurm", devices=8)
    assert reply.status_code == 201, reply.text
    worker = workers("gpu-slurm", "w2")
    job = jobs_gw.wait_job(reply.json()["id"], ("succeeded", "failed", "error", "timeout"), timeout=90)
    assert job["state"] == "succeeded", (job["error"], worker.output()[-3000:])
    assert job["result"]["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert job["result"]["env"]["SLURM_JOB_ID"]
    assert job["verdict"] == "pass" and "[kswarm] sandbox: network, mount" in log_of(jobs_gw, job["id"])
