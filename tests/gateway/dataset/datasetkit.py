"""Test support for the dataset build: a real gateway with the forge (and its gate), the task board and
the job runner, and helpers that play agents, reviewers and a job worker over the real REST APIs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "forge"))  # forgekit

from forgekit import ForgeGateway, Swarm

from gateway.client.jobs.pools import NodeConfig, PoolConfig
from gateway.dataset.plugin import DatasetPlugin
from gateway.forge.plugin import ForgePlugin
from gateway.forge.settings import ForgeSettings
from gateway.jobs.plugin import JobsPlugin
from gateway.jobs.settings import JobsSettings
from gateway.plugin import Plugin
from gateway.tasks.catalogue import TASKS_DIR
from gateway.tasks.plugin import TasksPlugin
from kstest.jobkit import harness_record
from orchestrator.verify.models import EnvironmentInfo, TrialResult

ENV = EnvironmentInfo(
    python="3.11.7",
    torch="2.13.0+cpu",
    triton="3.9.0",
    numpy="2.4",
    triton_interpret="1",
    platform="Linux",
    device="cpu",
    device_name="x86_64",
)


class DatasetGateway(ForgeGateway):
    """Plugins: forge (gate sweeping every 0.5 s), the task board, jobs (a cpu pool on the catalogue), the
    dataset's (its withdrawals route)."""

    def plugins(self) -> list[Plugin[Any]]:
        forge = ForgePlugin(ForgeSettings(gate_sweep_s=0.5, default_repo="kswarm/dataset"))
        pool = PoolConfig(name="cpu", nodes=[NodeConfig(name="local", devices=[0])], tasks_dir=TASKS_DIR)
        return [forge, TasksPlugin(), JobsPlugin(JobsSettings(pools=[pool])), DatasetPlugin()]


def harness_result(task: str, kernel: str, passed: bool) -> dict[str, Any]:
    """A harness record as the real harness writes it (fixture numbers, real schema)."""
    trials = [
        TrialResult(
            index=i,
            shape={"n": n},
            dtype="float32",
            seed=i,
            ok=passed or n % 16 == 0,
            max_abs_err=0.0 if passed or n % 16 == 0 else 0.03,
            max_rel_err=0.0,
            flags=[] if passed or n % 16 == 0 else ["mismatch"],
            device_shape=n == 1024,  # one of the task's device shapes, sampled (issue 22 point 4)
        )
        for i, n in enumerate((1024, 1000, 37))
    ]
    return harness_record(
        task,
        f"/tmp/checkout/{kernel}",
        "pass" if passed else "fail",
        evidence="cpu-screened" if passed else "none",  # what the harness's evidence_for gives
        reasons=[] if passed else ["2/3 trial(s) failed: mismatch"],
        flags=[] if passed else ["mismatch"],
        trials=[t.model_dump(mode="json") for t in trials],
        environment=ENV.model_dump(mode="json"),
    )


class Lab:
    """Agents, a reviewer and a job worker acting on the dataset repo through the real APIs."""

    def __init__(self, gw: DatasetGateway, swarm: Swarm) -> None:
        self.gw = gw
        self.swarm = swarm

    def push(self, who: str, branch: str, path: str, content: str, work: dict[str, Any]) -> str:
        """Commit ``path`` on ``branch`` (created from main on first use) and push; the new sha."""
        if branch not in work:
            git, repo = self.swarm.clone(who, f"w-{branch.replace('/', '-')}")
            git.run("checkout", "-q", "-b", branch, cwd=repo)
            work[branch] = (git, repo)
        git, repo = work[branch]
        sha = git.commit(repo, path, content, f"{branch}: {path}")
        assert git.push(repo, branch).returncode == 0
        return sha

    def verify(
        self,
        who: str,
        task: str,
        kernel: str,
        ref: str,
        passed: bool,
        reproduce: int | None = None,
        result: dict[str, Any] | None = None,
    ) -> str:
        """Submit a job as ``who`` and run it as worker1 (take, finish): the gateway records the
        verification (``result``, else ``harness_result``'s) and the gate publishes the statuses."""
        body: dict[str, Any] = {"task": task, "kernel": kernel, "ref": ref}
        if reproduce is not None:
            body["reproduce_pr"] = reproduce
        with self.gw.client(self.gw.tokens[who]) as c:
            job = c.post("/api/jobs", json=body)
        assert job.status_code == 201, job.text
        with self.gw.client(self.gw.tokens["worker1"]) as w:
            take = w.post(
                "/api/jobs/pools/cpu/take",
                json={"instance": "i1", "node": "local", "free_devices": 1, "free_ids": ["0"], "wait_s": 5},
            )
            assert take.status_code == 200, take.text
            assignment = take.json()
            assert assignment["job"]["id"] == job.json()["id"]
            finish = w.post(
                f"/api/jobs/{assignment['job']['id']}/finish",
                json={
                    "instance": "i1",
                    "attempt": assignment["attempt"],
                    "state": "succeeded" if passed else "failed",
                    "verdict": (result or {}).get("verdict") or ("pass" if passed else "fail"),
                    "exit_code": 0 if passed else 1,
                    "result": result or harness_result(task, kernel, passed),
                },
            )
            assert finish.status_code == 200 and finish.json()["recorded"], finish.text
        return str(job.json()["id"])
