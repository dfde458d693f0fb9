"""Real jobs for the Jobs panel: pools with (made-up) accelerators, submissions by agents over the REST
API, and a worker principal that takes, heartbeats and finishes them over the REST API, with result
records of the harness's own model. Nothing but the accelerators is fake."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ui_kit import UiGateway, ui_plugins

from gateway.client.jobs.models import VERDICT_STATES
from gateway.client.jobs.pools import NodeConfig, PoolConfig, PoolRules
from gateway.jobs.plugin import JobsPlugin
from gateway.jobs.settings import JobsSettings
from gateway.plugin import Plugin
from kstest.jobkit import harness_record, push_files

REPO = "kswarm/kernels"
SOLUTIONS = Path(__file__).resolve().parents[3] / "gateway" / "tasks" / "catalogue" / "solutions"
KERNELS = {
    "kernels/add/add_masked.py": (SOLUTIONS / "add.py").read_text(),
    "kernels/softmax/softmax_rowwise.py": (SOLUTIONS / "softmax.py").read_text(),
}
EVIL_LOG = '<script>alert("pwned")</script> & <b>not bold</b>\n'


def pools() -> list[PoolConfig]:
    gpu_rules = PoolRules(allowed_device_counts=[1, 2, 4, 8], max_running_per_agent=2)
    return [
        PoolConfig(name="cpu", nodes=[NodeConfig(name="local", devices=[0, 1])]),
        PoolConfig(
            name="gpu-h100",
            device="cuda",
            nodes=[
                NodeConfig(name="node0", devices=list(range(8))),
                NodeConfig(name="node1", devices=[0, 1]),
            ],
            rules=gpu_rules,
        ),
        PoolConfig(
            name="npu-910c",
            device="npu",
            executor="docker",
            nodes=[NodeConfig(name="n0", devices=list(range(8)))],
            rules=PoolRules(allowed_device_counts=[8], max_running_per_agent=1),
        ),
    ]


def jobs_plugin() -> JobsPlugin:
    """The real job runner with these pools (replaces the default one); no reclaims mid-test."""
    return JobsPlugin(JobsSettings(pools_file=None, pools=pools(), claim_idle_s=3600, reclaim_every_s=60))


class JobsUiGateway(UiGateway):
    def plugins(self) -> list[Plugin[Any]]:
        return ui_plugins(jobs_plugin())


def result_record(task: str, kernel: str, pool: str, verdict: str, **extra: Any) -> dict[str, Any]:
    """A result record as the harness writes it (validated by its model)."""
    return harness_record(task, kernel, verdict, pool, **extra)


def trial(index: int, ok: bool, flags: list[str] | None = None, detail: str | None = None) -> dict[str, Any]:
    errors = (0.0, 0.0) if ok else (31339.2, 1.3e6)
    return {
        "index": index,
        "shape": {"n": 1000 * (index + 1)},
        "dtype": "float32",
        "seed": index,
        "ok": ok,
        "max_abs_err": errors[0],
        "max_rel_err": errors[1],
        "flags": flags or [],
        "detail": detail,
        "launches": 1,
    }


def timing(n: int, kernel_ms: float, eager_ms: float) -> dict[str, Any]:
    def stats(ms: float) -> dict[str, Any]:
        return {
            "median_ms": ms,
            "p20_ms": ms * 0.98,
            "p80_ms": ms * 1.02,
            "mean_ms": ms,
            "min_ms": ms * 0.95,
            "n": 50,
        }

    speedup = eager_ms / kernel_ms
    return {
        "shape": {"n": n},
        "dtype": "float16",
        "candidate": stats(kernel_ms),
        "baseline": stats(eager_ms),
        "speedup": speedup,
        "suspicious": speedup > 10,
    }


@dataclass
class SeededJobs:
    flagged: str = ""  # failed: mismatch + unwritten_output, a log line with <script>
    passed: str = ""  # succeeded, bench with timings
    unverifiable: str = ""  # cpu, unverifiable
    running: str = ""  # running on gpu-h100 node0, devices 4..7
    queued: str = ""  # waiting in npu-910c
    reproduction: str = ""  # running on node1 for a PR, when a PR was given
    tokens: dict[str, str] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)  # the running jobs' attempt numbers


class Worker:
    """A worker principal driving the real REST API, as ``orchestrator.worker`` does (one instance
    per node: the gateway leases a node to one consumer)."""

    def __init__(self, gw: UiGateway, token: str, instance: str = "i0") -> None:
        self.gw, self.token, self.instance = gw, token, instance

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.gw.client(self.token) as client:
            reply = client.post(path, json={"instance": self.instance, **body})
        assert reply.status_code == 200, f"POST {path}: {reply.status_code} {reply.text}"
        return reply.json()

    def take(self, pool: str, node: str, free: list[int]) -> tuple[str, int]:
        ids = [str(d) for d in free]
        got = self.call(
            f"/api/jobs/pools/{pool}/take",
            {"node": node, "free_devices": len(free), "free_ids": ids, "wait_s": 0},
        )
        return got["job"]["id"], got["attempt"]

    def heartbeat(self, job_id: str, attempt: int, log: str) -> None:
        assert self.call(f"/api/jobs/{job_id}/heartbeat", {"attempt": attempt, "log": log})["ok"]

    def finish(self, job_id: str, attempt: int, verdict: str, result: dict[str, Any], log: str) -> None:
        codes = {"pass": 0, "fail": 1, "error": 2, "unverifiable": 3}
        reasons = result.get("reasons") or result.get("unverifiable_reasons") or []
        body = {
            "attempt": attempt,
            "state": VERDICT_STATES[verdict].value,
            "verdict": verdict,
            "error": None if verdict == "pass" else "; ".join(reasons) or verdict,
            "exit_code": codes[verdict],
            "result": result,
            "log": log,
        }
        assert self.call(f"/api/jobs/{job_id}/finish", body)["recorded"]


def push_kernels(gw: UiGateway, tmp: Path, token: str, name: str) -> str:
    """Repo kswarm/kernels (made when missing) and a branch ``<name>/jobs`` with the example kernels."""
    with gw.client(gw.operator_token) as op:
        reply = op.post("/api/forge/repos", json={"org": "kswarm", "name": "kernels"})
        assert reply.status_code in (201, 409), reply.text
    branch = f"{name}/jobs"
    push_files(gw, tmp, REPO, name, token, branch, KERNELS)
    return branch


PR_KERNEL = "kernels/softmax/dev-1_oneblock.py"  # git_kit.open_demo_pr's kernel


def seed_jobs(
    gw: UiGateway, tmp: Path, tokens: dict[str, str] | None = None, pr: int | None = None
) -> SeededJobs:
    """Finished jobs (flagged, passed, unverifiable), a running one, a queued one; with ``pr`` (a PR of
    dev-1 with ``PR_KERNEL``, see git_kit), a reviewer's reproduction of it running too. ``tokens``:
    principals made already (agents dev-1, dev-2, reviewer and workers w-gpu, w-cpu are made if missing)."""
    seeded = SeededJobs()
    tokens = dict(tokens or {})
    for name in ("dev-1", "dev-2", "reviewer", "w-gpu", "w-cpu"):
        if name not in tokens:
            tokens[name] = gw.add_principal(name, "worker" if name.startswith("w-") else "agent")
    seeded.tokens = tokens
    ref = push_kernels(gw, tmp, tokens["dev-1"], "dev-1")
    add, softmax = "kernels/add/add_masked.py", "kernels/softmax/softmax_rowwise.py"

    def submit(who: str, **body: Any) -> str:
        with gw.client(tokens[who]) as agent:
            reply = agent.post("/api/jobs", json={"repo": REPO, **body})
        assert reply.status_code == 201, reply.text
        return reply.json()["id"]

    gpu, cpu = Worker(gw, tokens["w-gpu"]), Worker(gw, tokens["w-cpu"])
    # 1. A cheat caught: values wrong, output partly unwritten.
    seeded.flagged = submit("dev-1", task="add", kernel=add, ref=ref, pool="gpu-h100", devices=4)
    job, attempt = gpu.take("gpu-h100", "node0", list(range(8)))
    assert job == seeded.flagged
    gpu.heartbeat(job, attempt, "static gate: ok\ntrial 0: " + EVIL_LOG)
    bad = ["mismatch", "unwritten_output"]
    result = result_record(
        "add",
        add,
        "cuda",
        "fail",
        reasons=["trial 0: 232 mismatched, 232 unwritten of 1000"],
        flags=bad,
        trials=[
            trial(0, False, bad, "output 0: 232 mismatched, 0 non-finite, 232 unwritten of 1000"),
            trial(1, True),
        ],
    )
    gpu.finish(job, attempt, "fail", result, "verdict: fail (mismatch, unwritten_output)\n")
    # 2. An honest bench job: passes, 1.9x over eager.
    seeded.passed = submit(
        "dev-2", task="softmax", kernel=softmax, ref=ref, pool="gpu-h100", devices=2, kind="bench"
    )
    job, attempt = gpu.take("gpu-h100", "node0", list(range(8)))
    timings = [timing(4096, 0.021, 0.046), timing(65536, 0.110, 0.209)]
    result = result_record(
        "softmax", softmax, "cuda", "pass", trials=[trial(0, True), trial(1, True)], timings=timings
    )
    gpu.finish(job, attempt, "pass", result, "timing: 2 cases\nverdict: pass\n")
    # 3. On the cpu pool: nothing wrong found, but part of the task cannot run there.
    seeded.unverifiable = submit("dev-2", task="add", kernel=add, ref=ref, pool="cpu")
    job, attempt = cpu.take("cpu", "local", [0, 1])
    why = ["bfloat16 cases are not run on the cpu interpreter"]
    result = result_record(
        "add", add, "cpu", "unverifiable", trials=[trial(0, True)], unverifiable_reasons=why
    )
    cpu.finish(job, attempt, "unverifiable", result, "verdict: unverifiable\n")
    # 4. Running on node0's devices 4..7, with live output.
    seeded.running = submit("dev-1", task="softmax", kernel=softmax, ref=ref, pool="gpu-h100", devices=4)
    job, attempt = gpu.take("gpu-h100", "node0", [4, 5, 6, 7])
    gpu.heartbeat(job, attempt, "static gate: ok\ntrial 0 of 30 ...\n")
    seeded.attempts[job] = attempt
    # 5. A reviewer reproducing a PR, on node1.
    if pr is not None:
        seeded.reproduction = submit(
            "reviewer", kernel=PR_KERNEL, pool="gpu-h100", devices=2, reproduce_pr=pr
        )
        job, attempt = Worker(gw, tokens["w-gpu"], "i1").take("gpu-h100", "node1", [0, 1])
        assert job == seeded.reproduction
        seeded.attempts[job] = attempt
    # 6. Waiting: nobody serves the npu pool.
    seeded.queued = submit("dev-2", task="add", kernel=add, ref=ref, pool="npu-910c", devices=8)
    return seeded


def finish_running(gw: UiGateway, seeded: SeededJobs, job: str = "", log: str = "verdict: pass\n") -> None:
    """A running job (default: the one on node0) passes, as its worker reports when the harness is done."""
    job = job or seeded.running
    instance = "i1" if job == seeded.reproduction else "i0"  # the worker instance serving its node
    kernel = PR_KERNEL if job == seeded.reproduction else "kernels/softmax/softmax_rowwise.py"
    result = result_record("softmax", kernel, "cuda", "pass", trials=[trial(0, True)])
    Worker(gw, seeded.tokens["w-gpu"], instance).finish(job, seeded.attempts[job], "pass", result, log)
