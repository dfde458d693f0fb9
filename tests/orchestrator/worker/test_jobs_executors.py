"""Executors: the local one's confinement (attacks included), the docker request, Slurm's script."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from docker.types import DeviceRequest, Mount, Ulimit

from gateway.client.jobs.pools import JobLimits
from kstest.jobkit import HERE
from orchestrator.sandbox.plan import SandboxPlan
from orchestrator.worker.executors.base import ExecSpec, drop_planted_record, job_env
from orchestrator.worker.executors.docker import DockerExecutor
from orchestrator.worker.executors.local import LocalExecutor, make_writable, readable_paths
from orchestrator.worker.executors.slurm import SlurmExecutor

STANDIN = str(HERE / "standin_harness.py")


@pytest.fixture
def job_dirs(short_tmp: Path) -> Iterator[tuple[Path, Path]]:
    short_tmp.chmod(0o711)
    src, out = short_tmp / "src", short_tmp / "out"
    src.mkdir()
    out.mkdir()
    yield src, out
    make_writable(src)


def spec_for(src: Path, out: Path, directives: str, **extra: object) -> ExecSpec:
    (src / "k.py").write_text(directives)
    argv = [sys.executable, STANDIN, "--candidate", str(src / "k.py"), "--out", str(out / "result.json")]
    fields: dict = dict(
        job_id="j1",
        attempt=1,
        argv=argv,
        checkout=src,
        outdir=out,
        env=job_env(out),
        timeout_s=30,
        limits=JobLimits(),
    )
    fields.update(extra)
    return ExecSpec(**fields)


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()[1]
    server.close()


def test_local_job_cannot_reach_a_listening_loopback_port(job_dirs, listener: int) -> None:
    src, out = job_dirs
    probe = socket.create_connection(("127.0.0.1", listener), timeout=2)  # the port does answer us
    probe.close()
    executor = LocalExecutor()
    if executor.unavailable is not None:  # the refusal itself: test_job_sandbox.py
        pytest.skip(f"no sandbox on this machine, jobs are refused: {executor.unavailable}")
    outcome = asyncio.run(
        executor.run(spec_for(src, out, f"# standin: connect {listener}\n"), asyncio.Event())
    )
    assert outcome.returncode == 0, outcome.output
    record = json.loads((out / "result.json").read_text())
    assert record["connect"].startswith("failed"), record
    assert "network: namespace (no interfaces up)" in outcome.isolation


@pytest.mark.skipif(os.geteuid() != 0, reason="the uid drop applies when the worker runs as root")
def test_local_job_runs_as_nobody_on_a_read_only_checkout_with_a_clean_env(job_dirs, monkeypatch) -> None:
    src, out = job_dirs
    monkeypatch.setenv("KSWARM_SECRET_PROBE", "leaked")
    outcome = asyncio.run(
        LocalExecutor().run(spec_for(src, out, "# standin: write x\n", env=job_env(out)), asyncio.Event())
    )
    record = json.loads((out / "result.json").read_text())
    assert record["uid"] == 65534, outcome.output
    assert record["write"].startswith("failed"), "the checkout is read-only for the job"
    assert record["env"]["KSWARM_SECRET_PROBE"] is None, "only allow-listed variables reach the job"
    assert record["env"]["HOME"] == str(out / "home")


def test_local_limits_timeout_cancel_and_output_cap(job_dirs) -> None:
    src, out = job_dirs
    executor = LocalExecutor()
    slow = asyncio.run(
        executor.run(spec_for(src, out, "# standin: sleep 30\n", timeout_s=1.5), asyncio.Event())
    )
    assert slow.timed_out and slow.returncode is None and slow.wall_s < 10

    async def cancel_soon() -> object:
        cancel = asyncio.Event()
        asyncio.get_running_loop().call_later(1.0, cancel.set)
        return await executor.run(spec_for(src, out, "# standin: sleep 30\n"), cancel)

    cancelled = asyncio.run(cancel_soon())
    assert cancelled.cancelled and cancelled.wall_s < 10  # type: ignore[attr-defined]
    limits = JobLimits(output_bytes=4096)
    chatty = asyncio.run(
        executor.run(spec_for(src, out, "# standin: spam 100000\n", limits=limits), asyncio.Event())
    )
    assert chatty.truncated and chatty.returncode == 0 and len(chatty.output) < 4200
    assert "output cut at 4096 bytes" in chatty.output


def test_docker_container_request_is_exact(short_tmp: Path) -> None:
    src, out = short_tmp / "src", short_tmp / "out"
    limits = JobLimits(memory_bytes=2 << 30, nproc=256, cpus=1.5, cpu_time_s=100)
    base = dict(
        job_id="j9",
        attempt=2,
        argv=["/py", "-m", "orchestrator.verify"],
        checkout=src,
        outdir=out,
        env={"HOME": "/h"},
        timeout_s=60,
        limits=limits,
        image="kswarm/empty",
        pool="gpu-h100",
    )
    executor = DockerExecutor(client_factory=lambda: None, shared_paths=["/usr", "/bin"])
    gpu = executor.container_request(ExecSpec(**base, device="cuda", devices=(4, 5, 6, 7)))  # type: ignore[arg-type]
    expected_mounts = [
        Mount("/usr", "/usr", type="bind", read_only=True),
        Mount("/bin", "/bin", type="bind", read_only=True),
        Mount(str(src), str(src), type="bind", read_only=True),
        Mount(str(out), str(out), type="bind", read_only=False),
    ]
    assert gpu == {
        "image": "kswarm/empty",
        "command": ["/py", "-m", "orchestrator.verify"],
        "name": "kswarm-job-j9-2",
        "labels": {"kswarm.job": "j9", "kswarm.attempt": "2", "kswarm.pool": "gpu-h100"},
        "detach": True,
        "environment": {"HOME": "/h", "CUDA_VISIBLE_DEVICES": "0,1,2,3"},
        "user": "65534:65534",
        "working_dir": str(out),
        "mounts": expected_mounts,
        "network_mode": "none",
        "read_only": True,
        "tmpfs": {"/tmp": "rw,nosuid,nodev,size=512m,mode=1777"},
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "mem_limit": 2 << 30,
        "memswap_limit": 2 << 30,
        "nano_cpus": 1_500_000_000,
        "pids_limit": 256,
        "ulimits": [
            Ulimit(name="nofile", soft=1024, hard=1024),
            Ulimit(name="fsize", soft=1 << 30, hard=1 << 30),
            Ulimit(name="cpu", soft=100, hard=100),
            Ulimit(name="core", soft=0, hard=0),
        ],
        "device_requests": [
            DeviceRequest(driver="nvidia", device_ids=["4", "5", "6", "7"], capabilities=[["gpu"]])
        ],
        "devices": [],
        "restart_policy": {"Name": "no"},
    }
    tasks = short_tmp / "task-cache" / "add"
    with_task = executor.container_request(ExecSpec(**base, device="cpu", task_dir=tasks))  # type: ignore[arg-type]
    # main's task definition (cached in the worker's own dir) reaches the job read-only, nothing above it
    task_mount = Mount(str(tasks), str(tasks), type="bind", read_only=True)
    assert with_task["mounts"] == [*expected_mounts, task_mount]
    npu = executor.container_request(ExecSpec(**base, device="npu", devices=(0, 1)))  # type: ignore[arg-type]
    assert npu["device_requests"] == [] and npu["network_mode"] == "none"
    assert npu["devices"] == [
        "/dev/davinci0:/dev/davinci0:rwm",
        "/dev/davinci1:/dev/davinci1:rwm",
        "/dev/davinci_manager:/dev/davinci_manager:rwm",
        "/dev/devmm_svm:/dev/devmm_svm:rwm",
        "/dev/hisi_hdc:/dev/hisi_hdc:rwm",
    ]
    assert npu["environment"]["ASCEND_RT_VISIBLE_DEVICES"] == "0,1"
    assert (
        Mount("/usr/local/Ascend/driver", "/usr/local/Ascend/driver", type="bind", read_only=True)
        in npu["mounts"]
    )
    cpu = executor.container_request(ExecSpec(**base))  # type: ignore[arg-type]
    assert (
        cpu["device_requests"] == []
        and cpu["devices"] == []
        and "CUDA_VISIBLE_DEVICES" not in cpu["environment"]
    )


def _docker_client() -> object | None:
    if not os.environ.get("DOCKER_HOST"):
        return None
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
        client.images.get("kswarm/empty")
        return client
    except Exception:
        return None


@pytest.mark.docker
def test_docker_runs_a_real_job_without_network(job_dirs, listener: int) -> None:
    client = _docker_client()
    if client is None:
        pytest.skip("no Docker daemon with the kswarm/empty image at DOCKER_HOST (infra/ci/dockerd-start.sh)")
    src, out = job_dirs
    executor = DockerExecutor(client_factory=lambda: client)
    spec = spec_for(src, out, f"# standin: connect {listener}\n# standin: write x\n")
    outcome = asyncio.run(executor.run(spec, asyncio.Event()))
    assert outcome.returncode == 0, outcome.output
    record = json.loads((out / "result.json").read_text())
    assert record["connect"].startswith("failed") and record["write"].startswith("failed")
    assert record["uid"] == 65534
    assert not client.containers.list(all=True, filters={"name": "kswarm-job-j1-1"}), "container removed"


def test_slurm_batch_script_and_arguments(short_tmp: Path) -> None:
    out = short_tmp / "out"
    spec = ExecSpec(
        job_id="j5",
        attempt=1,
        argv=["/py", "-m", "orchestrator.verify", "--out", "/o/r.json"],
        checkout=short_tmp,
        outdir=out,
        env={"HOME": "/h", "PATH": "/usr/bin"},
        timeout_s=150,
        limits=JobLimits(),
        device="cuda",
        device_count=8,
        gres="gpu",
        partition="kswarm",
    )
    executor = SlurmExecutor()
    assert executor.sbatch_args(spec, out / "job.sh") == [
        "sbatch",
        "--parsable",
        "--nodes=1",
        "--job-name=kswarm-j5",
        f"--output={out}/slurm.out",
        f"--chdir={out}",
        "--time=4",
        "--export=NONE",
        "--gres=gpu:8",
        "--partition=kswarm",
        f"{out}/job.sh",
    ]
    script = executor.batch_script(spec)
    assert script.startswith("#!/bin/sh\n")
    # the job enters the one sandbox with its plan: its argv and allow-listed env, Slurm's device
    # variables added on the node; the launcher gets PATH and the project only
    plan_arg = next(line for line in script.splitlines() if "orchestrator.sandbox" in line)
    words = shlex.split(plan_arg)
    plan = SandboxPlan.model_validate_json(words[-2])
    assert plan.argv == ["/py", "-m", "orchestrator.verify", "--out", "/o/r.json"]
    assert plan.env == {"HOME": "/h", "PATH": "/usr/bin"} and plan.loopback is False
    assert str(out.resolve()) in plan.rw and str(short_tmp.resolve()) in plan.ro
    assert "CUDA_VISIBLE_DEVICES" in words[3] and "os.execve" in words[3]
    assert f"echo $code > {out}/exit_code" in script


def test_a_planted_result_record_is_removed_and_a_real_one_kept(short_tmp: Path) -> None:
    """The worker reads result.json with its own rights once the job is gone: a link (to a file of the
    worker's), a fifo or a dir planted there by the job is removed; a regular file stays."""
    secret = short_tmp / "worker-secret.json"
    secret.write_text('{"verdict": "pass"}')
    out = short_tmp / "out"
    out.mkdir()
    spec = spec_for(short_tmp, out, "")
    for plant in (
        lambda p: p.symlink_to(secret),
        lambda p: os.mkfifo(p),
        lambda p: (p.mkdir(), (p / "x").write_text("x")),
    ):
        plant(spec.result_path)
        drop_planted_record(spec)
        assert not os.path.lexists(spec.result_path)
    assert secret.read_text() == '{"verdict": "pass"}'
    spec.result_path.write_text('{"verdict": "fail"}')
    drop_planted_record(spec)
    assert spec.result_path.read_text() == '{"verdict": "fail"}'


def test_the_job_reads_what_its_command_names_but_never_a_dir_holding_the_host(short_tmp: Path) -> None:
    """Paths named on the command line or in toolkit variables are bound read-only; one that would
    show the whole host, the shared tmp dirs or the worker's work dir (other jobs) is not."""
    toolkit = short_tmp / "toolkit"
    toolkit.mkdir()
    workdir = short_tmp / "workers"
    src, out = workdir / "j1-1" / "src", workdir / "j1-1" / "out"
    src.mkdir(parents=True)
    out.mkdir()
    spec = spec_for(src, out, "", env={"PYTHONPATH": f"/:/tmp:{workdir}:{toolkit}", "CUDA_HOME": "/var"})
    spec.argv += ["--task", str(toolkit), "--out", str(out / "result.json"), "/run"]
    paths = readable_paths(spec)
    assert str(toolkit) in paths and "/" not in paths and "/tmp" not in paths and "/run" not in paths
    assert not any(workdir.is_relative_to(p) or Path(p).is_relative_to(workdir) for p in paths), paths
    assert "/var" not in paths  # /var holds /var/tmp
    plan = LocalExecutor().plan(spec)
    assert plan.rw == [str(out)] and plan.ro[-1] == str(src) and str(workdir) in plan.hide
