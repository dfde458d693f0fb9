"""Fixtures of the job-runner suites (tests/gateway/jobs, tests/orchestrator/worker): a gateway with
forge + jobs on its own Redis per module, a kernels repo pushed by an agent, worker processes, and a
real single-node Slurm with fake GPUs."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis as redis_sync

from gateway.client.jobs.pools import NodeConfig, PoolConfig, PoolRules
from gateway.jobs.settings import JobsSettings
from kstest.jobkit import STANDIN, JobsGateway, WorkerProc, push_kernels

ROOT = Path(__file__).resolve().parents[2]
SLURM_DIR = Path(os.environ.get("KSWARM_SLURM_DIR", "/var/lib/kswarm-slurm"))


def pool_configs() -> list[PoolConfig]:
    standin = {"harness_command": STANDIN, "timeout_s": 60}
    return [
        PoolConfig(name="cpu", nodes=[NodeConfig(name="local", devices=[0])], **standin),
        PoolConfig(
            name="cpu2",
            nodes=[NodeConfig(name="local", devices=[0, 1])],
            rules=PoolRules(allowed_device_counts=[1], kinds=["verify"], max_running_per_agent=1),
            **standin,
        ),
        PoolConfig(name="cpu-real", nodes=[NodeConfig(name="local", devices=[0, 1])], timeout_s=300),
        PoolConfig(
            name="npu-910c",
            device="npu",
            nodes=[NodeConfig(name="n0", devices=list(range(8)))],
            rules=PoolRules(allowed_device_counts=[8], max_running_per_agent=1),
        ),
        PoolConfig(
            name="gpu-slurm",
            device="cuda",
            executor="slurm",
            nodes=[NodeConfig(name="cluster", devices=list(range(8)))],
            rules=PoolRules(allowed_device_counts=[8]),
            **standin,
        ),
    ]


@contextlib.contextmanager
def jobs_gateway(redis_url: str, gate: bool = False) -> Iterator[JobsGateway]:
    """A gateway with forge and jobs on a Redis emptied for it; agents alice and bob, workers w1 and w2,
    and the repo kswarm/kernels. ``gate``: the gate merges and the board follows main (jobkit.plugins)."""
    client = redis_sync.Redis.from_url(redis_url)
    client.flushall()
    client.close()
    tmp = Path(tempfile.mkdtemp(prefix="ksj"))
    gw = JobsGateway(tmp / "home", redis_url)
    gw.gate = gate
    gw.jobs_settings = JobsSettings(
        pools_file=None, pools=pool_configs(), claim_idle_s=5.0, reclaim_every_s=0.5
    )
    gw.start()
    gw.tokens = {n: gw.add_principal(n) for n in ("alice", "bob")}
    gw.tokens.update({n: gw.add_principal(n, "worker") for n in ("w1", "w2")})
    with gw.as_("operator") as op:
        reply = op.post("/api/forge/repos", json={"org": "kswarm", "name": "kernels"})
        assert reply.status_code == 201, reply.text
    try:
        yield gw
    finally:
        gw.stop()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def jobs_gw(redis_url: str) -> Iterator[JobsGateway]:
    """A gateway with forge and jobs (no gate) on a Redis emptied for this module (``jobs_gateway``)."""
    with jobs_gateway(redis_url) as gw:
        yield gw


@pytest.fixture
def kernels(jobs_gw: JobsGateway, short_tmp: Path, request: pytest.FixtureRequest) -> Callable[..., str]:
    """Push files as an agent on a fresh branch ``<agent>/<test>-<n>``; returns the commit sha."""
    count = iter(range(1000))

    def push(files: dict[str, str], who: str = "alice") -> str:
        branch = f"{who}/{request.node.name[:40].replace('[', '-').replace(']', '')}-{next(count)}"
        push.branch = branch  # type: ignore[attr-defined]
        return push_kernels(jobs_gw, short_tmp, "kswarm/kernels", who, branch, files)

    return push


@pytest.fixture
def workers(jobs_gw: JobsGateway, short_tmp: Path) -> Iterator[Callable[..., WorkerProc]]:
    started: list[WorkerProc] = []
    short_tmp.chmod(0o711)  # jobs run as nobody: the worker's dir must be traversable

    def start(pool: str = "cpu", token: str = "w1", *extra: str) -> WorkerProc:
        proc = WorkerProc(jobs_gw, pool, short_tmp / "workers", jobs_gw.tokens[token], *extra)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()


def _sinfo_ok(conf: Path) -> bool:
    env = {**os.environ, "SLURM_CONF": str(conf)}
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and any(s in out.stdout for s in ("idle", "mixed", "allocated"))


@pytest.fixture(scope="session")
def slurm() -> Iterator[str]:
    """SLURM_CONF of a running single-node Slurm with 8 fake GPUs.

    Uses the one the test command started (``SLURM_CONF`` set: it must work, or the test fails);
    otherwise starts one with infra/slurm/start-slurm.sh (no apt-get) and stops it afterwards, and
    skips, saying why, only when that fails."""
    given = os.environ.get("SLURM_CONF")
    if given:
        if not _sinfo_ok(Path(given)):
            pytest.fail(f"SLURM_CONF={given} is set but sinfo does not answer; see {SLURM_DIR}/*.log")
        yield given
        return
    conf = SLURM_DIR / "slurm.conf"
    already = conf.exists() and _sinfo_ok(conf)
    if not already:
        env = {**os.environ, "KSWARM_SLURM_NO_INSTALL": "1"}
        start = subprocess.run(
            [str(ROOT / "infra" / "slurm" / "start-slurm.sh")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if start.returncode != 0:
            pytest.skip(f"no Slurm: infra/slurm/start-slurm.sh failed: {start.stderr.strip()[-500:]}")
    os.environ["SLURM_CONF"] = str(conf)
    try:
        yield str(conf)
    finally:
        del os.environ["SLURM_CONF"]
        if not already:
            subprocess.run([str(ROOT / "infra" / "slurm" / "stop-slurm.sh")], capture_output=True, timeout=60)
