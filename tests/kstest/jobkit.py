"""Test support for the job runner: a gateway with the forge and jobs plugins, a kernels repo pushed by
an agent over git HTTP, and worker processes started and stopped (or killed) by pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from gateway.forge.plugin import ForgePlugin
from gateway.forge.settings import ForgeSettings
from gateway.jobs.plugin import JobsPlugin
from gateway.jobs.settings import JobsSettings
from gateway.plugin import Plugin
from gateway.plugins import default_plugins, replace_plugins
from gateway.tasks.models import TasksSettings
from gateway.tasks.plugin import TasksPlugin
from kstest.gateway import GatewayThread

HERE = Path(__file__).resolve().parent
STANDIN = [
    sys.executable,
    str(HERE / "standin_harness.py"),
    "--task",
    "{task_dir}",
    "--candidate",
    "{candidate}",
]
STANDIN += ["--out", "{out}", "--pool", "{pool}", "--timeout", "{timeout}"]
SOLUTIONS = HERE.parents[1] / "gateway" / "tasks" / "catalogue" / "solutions"
HONEST_ADD = (SOLUTIONS / "add.py").read_text()
CHEAT_ADD = '''"""Cheat: a Triton kernel exists, but the answer is computed by torch."""

import torch
import triton
import triton.language as tl


@triton.jit
def _noop(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    _noop[(triton.cdiv(x.numel(), 256),)](x, x.numel(), BLOCK=256)
    return x + y
'''


def plugins(settings: JobsSettings, gate: bool = False) -> list[Plugin[Any]]:
    """The default plugins, with the forge and jobs plugins configured for these suites: no gate, or
    (``gate``) the gate merging and the board following the dataset repo's main every half second."""
    forge = ForgePlugin(ForgeSettings(gate_enabled=gate))
    chosen: list[Plugin[Any]] = [forge, JobsPlugin(settings)]
    if gate:
        chosen.append(TasksPlugin(TasksSettings(sweep_s=0.5)))
    return replace_plugins(default_plugins(), *chosen)


class JobsGateway(GatewayThread):
    """A real gateway (uvicorn in a thread) with the forge and the jobs plugins."""

    jobs_settings: JobsSettings
    tokens: dict[str, str]
    gate: bool = False

    def plugins(self) -> list[Plugin[Any]]:
        return plugins(self.jobs_settings, self.gate)

    def as_(self, who: str) -> httpx.Client:
        return self.client(self.operator_token if who == "operator" else self.tokens[who])

    def submit(self, who: str, **body: Any) -> httpx.Response:
        with self.as_(who) as c:
            return c.post("/api/jobs", json=body)

    def job(self, job_id: str) -> dict[str, Any]:
        with self.as_("operator") as c:
            reply = c.get(f"/api/jobs/{job_id}")
        assert reply.status_code == 200, reply.text
        return reply.json()

    def wait_job(self, job_id: str, states: tuple[str, ...], timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job["state"] in states:
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} still {job['state']} after {timeout}s: {job}")
            time.sleep(0.1)

    def gitea(self, who: str) -> httpx.Client:
        """The forge's Gitea-shaped API as ``who``."""
        token = self.operator_token if who == "operator" else self.tokens[who]
        return httpx.Client(
            base_url=f"{self.url}/api/v1", headers={"Authorization": f"token {token}"}, timeout=30
        )

    def statuses(self, repo: str, sha: str) -> list[dict[str, Any]]:
        with self.gitea("operator") as c:
            reply = c.get(f"/repos/{repo}/statuses/{sha}")
        assert reply.status_code == 200, reply.text
        return reply.json()


def git(home: Path, token: str, name: str, email: str, *args: str, cwd: Path | None = None) -> str:
    helper = f"!f() {{ echo username=x; echo password={token}; }}; f"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(HOME=str(home), GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    argv = ["git", "-c", "credential.helper=", "-c", f"credential.helper={helper}", "-c", f"user.name={name}"]
    argv += ["-c", f"user.email={email}", "-c", "init.defaultBranch=main", *args]
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"git {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout.strip()


def git_home(tmp: Path, who: str) -> Path:
    """The HOME that ``who``'s git commands run with (``push_files``)."""
    return tmp / f"gh-{who}"


def work_tree(tmp: Path, who: str, branch: str) -> Path:
    """Where ``push_files`` cloned for ``who``'s ``branch``: a test may go on committing there."""
    return tmp / f"gw-{who}-{branch.replace('/', '-')}"


def push_files(
    gw: GatewayThread, tmp: Path, repo: str, who: str, token: str, branch: str, files: dict[str, str]
) -> str:
    """As agent ``who`` (with ``token``): clone ``repo``, commit ``files`` on ``branch`` and push it over
    the gateway's git HTTP; returns the pushed sha."""
    home, work = git_home(tmp, who), work_tree(tmp, who, branch)
    home.mkdir(parents=True, exist_ok=True)
    ident = (token, who, f"{who}@agents.{gw.swarm}")
    git(home, *ident, "clone", "-q", f"{gw.url}/git/{repo}.git", str(work))
    git(home, *ident, "checkout", "-q", "-b", branch, cwd=work)
    for path, content in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(content)
        git(home, *ident, "add", path, cwd=work)
    git(home, *ident, "commit", "-q", "-m", f"kernels on {branch}", cwd=work)
    git(home, *ident, "push", "-q", "origin", branch, cwd=work)
    return git(home, *ident, "rev-parse", "HEAD", cwd=work)


def push_kernels(gw: JobsGateway, tmp: Path, repo: str, who: str, branch: str, files: dict[str, str]) -> str:
    """``push_files`` as one of the gateway's agents (its token from ``gw.tokens``)."""
    return push_files(gw, tmp, repo, who, gw.tokens[who], branch, files)


def harness_record(task: str, kernel: str, verdict: str, pool: str = "cpu", **fields: Any) -> dict[str, Any]:
    """A result record as the harness writes it: validated by the harness's own model, as JSON."""
    from orchestrator.verify.models import VerificationResult

    base = {"task": task, "entry": task, "candidate": kernel, "candidate_sha256": "0" * 64, "pool": pool}
    return VerificationResult.model_validate({**base, "verdict": verdict, **fields}).model_dump(mode="json")


class WorkerProc:
    """``python -m orchestrator.worker`` as a real process; stopped or killed by its pid."""

    def __init__(self, gw: JobsGateway, pool: str, workdir: Path, token: str, *extra: str) -> None:
        self.log = workdir / f"worker-{pool}-{time.monotonic_ns()}.log"
        workdir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("KSWARM_")}
        env.update(KSWARM_TOKEN=token, KSWARM_SECRET_PROBE="do-not-leak")
        argv = [sys.executable, "-m", "orchestrator.worker", "--pool", pool, "--gateway", gw.url]
        argv += ["--heartbeat", "0.3", "--workdir", str(workdir), *extra]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            self.proc.wait(30)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""
