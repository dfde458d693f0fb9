"""Job-runner benchmark: submit→start latency, submissions per second, harness overhead.

Run: ``.venv/bin/python bench/jobs.py [--repeats 3]`` (starts its own Redis, a gateway with the forge
and jobs plugins, and worker processes; a few minutes on a small machine, most of it in Triton's
interpreter).

1. Submit→start latency on an idle pool: one worker long-polls; each job is submitted alone and the
   gap between the gateway's ``submitted`` and ``started`` times is measured (p50/p90).
2. Submissions per second: 16 concurrent clients submit to a pool no worker serves (each submission
   resolves the ref and checks the kernel file in the forge's repository).
3. Harness overhead: the same kernel's trials (``add``, honest, TRITON_INTERPRET=1) run bare in one
   interpreter process, against the harness CLI (its child a fork of the fork server's zygote, which
   imports torch and Triton while the CLI does), against a whole job (checkout, confinement, harness,
   result recorded), as ratios, plus the harness's own split (child fork to exit, the rest). Two bare
   baselines: the task's cpu trials (what this bench measured before issue 22), and every trial the
   harness just ran (its device-shape, fresh and regression trials too, each one plain call on its
   shape, dtype and seed; a device shape runs whole), which is the per-trial ratio issue 26 asks for.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, pct

sys.path.insert(0, str(ROOT / "tests"))  # kstest
sys.path.insert(0, str(ROOT))  # the real packages before tests/gateway (a namespace dir of that name)
from gateway.client import AsyncGatewayClient, GatewayTarget
from gateway.client.jobs.pools import NodeConfig, PoolConfig, PoolRules
from gateway.jobs.settings import JobsSettings
from kstest.jobkit import HONEST_ADD, JobsGateway, WorkerProc, push_kernels
from orchestrator.local.embedded_redis import EmbeddedRedis

TASK = ROOT / "gateway" / "tasks" / "catalogue" / "tasks" / "add"
NOOP = [
    "{python}",
    "-c",
    "import json, sys; open(sys.argv[1], 'w').write(json.dumps(dict(verdict='pass')))",
    "{out}",
]
# argv: task dir, candidate, and optionally a harness result whose trials to replay (shape, dtype, seed).
BARE = """
import importlib.util, json, sys, time
from orchestrator.verify.tasks import load_task, torch_dtype
task = load_task(sys.argv[1])
spec = importlib.util.spec_from_file_location("candidate", sys.argv[2])
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
entry = getattr(mod, task.entry)
if len(sys.argv) > 3:
    trials = [(t["shape"], t["dtype"], t["seed"]) for t in json.load(open(sys.argv[3]))["trials"]]
else:
    trials = [(t.case, t.dtype, t.seed) for t in task.trials(cpu=True)]
for case, dtype, seed in trials:
    entry(*task.make_inputs(case, torch_dtype(dtype), seed))
"""


def pools() -> list[PoolConfig]:
    one = [NodeConfig(name="local", devices=[0])]
    return [
        PoolConfig(name="cpu", nodes=one, harness_command=NOOP),
        PoolConfig(
            name="sink",
            nodes=one,
            rules=PoolRules(allowed_device_counts=[1], kinds=["verify"], max_queued_per_agent=100_000),
        ),
        PoolConfig(name="cpu-real", nodes=one, timeout_s=600),
    ]


def submit(gw: JobsGateway, sha: str, pool: str, kernel: str = "kernels/add/add_masked.py") -> dict:
    with gw.as_("bench") as c:
        reply = c.post("/api/jobs", json={"task": "add", "kernel": kernel, "ref": sha, "pool": pool})
    reply.raise_for_status()
    return reply.json()


def latency(gw: JobsGateway, sha: str, n: int) -> list[float]:
    gaps = []
    for i in range(n + 2):
        job = submit(gw, sha, "cpu")
        done = gw.wait_job(job["id"], ("succeeded", "failed", "error"), timeout=60)
        if i >= 2:  # the first two warm the worker's paths
            gaps.append(done["started"] - done["submitted"])
    return gaps


async def throughput(gw: JobsGateway, sha: str, total: int, clients: int) -> float:
    target = GatewayTarget(token=gw.tokens["bench"], url=gw.url, timeout=60)
    body = {"task": "add", "kernel": "kernels/add/add_masked.py", "ref": sha, "pool": "sink"}
    left = iter(range(total))

    async def one_client() -> None:
        async with AsyncGatewayClient(target) as client:
            for _ in left:
                await client.request("POST", "/api/jobs", json=body)

    started = time.perf_counter()
    await asyncio.gather(*(one_client() for _ in range(clients)))
    return total / (time.perf_counter() - started)


def quiet(limit_s: float = 60.0, busy_share: float = 0.15) -> None:
    """Wait until the machine is idle (under ``busy_share`` of one CPU for half a second) before a
    measurement: a worker's warm sandbox importing torch and Triton after a job would otherwise run
    beside the next bare run and slow it."""
    deadline = time.monotonic() + limit_s

    def busy_ticks() -> int:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields) - fields[3] - fields[4]  # all but idle and iowait

    hz = os.sysconf("SC_CLK_TCK")
    while time.monotonic() < deadline:
        before = busy_ticks()
        time.sleep(0.5)
        if (busy_ticks() - before) / hz < busy_share * 0.5:
            return


def timed(argv: list[str], env: dict[str, str]) -> float:
    quiet()
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True, cwd=tempfile.gettempdir())
    return time.perf_counter() - started


def harness_overhead(gw: JobsGateway, sha: str, kernel: Path, repeats: int) -> dict[str, float]:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1", "HOME": "/tmp"}
    out = Path(tempfile.mkdtemp()) / "r.json"
    cli = [sys.executable, "-m", "orchestrator.verify", "--task", str(TASK), "--candidate", str(kernel)]
    cli += ["--pool", "cpu", "--out", str(out), "--no-timing"]
    bare: list[float] = []
    bare_all: list[float] = []
    harness: list[float] = []
    child: list[float] = []
    jobs: list[float] = []
    trials: list[int] = []
    for _ in range(repeats):  # interleaved, so that the machine's load hits all of them alike
        bare.append(timed([sys.executable, "-c", BARE, str(TASK), str(kernel)], env))
        harness.append(timed(cli, env))
        result = json.loads(out.read_text())
        child.append(result["durations"]["child_s"])
        trials.append(len(result["trials"]))
        bare_all.append(timed([sys.executable, "-c", BARE, str(TASK), str(kernel), str(out)], env))
        quiet()
        job = submit(gw, sha, "cpu-real")
        done = gw.wait_job(job["id"], ("succeeded", "failed", "error", "timeout"), timeout=900)
        assert done["state"] == "succeeded", done["error"]
        jobs.append(done["finished"] - done["submitted"])
    return {
        "bare": statistics.median(bare),
        "bare_all": statistics.median(bare_all),
        "trials": statistics.median(trials),
        "harness": statistics.median(harness),
        "child": statistics.median(child),
        "job": statistics.median(jobs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency-jobs", type=int, default=30)
    parser.add_argument("--submissions", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    started_load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    tmp = Path(tempfile.mkdtemp(prefix="ksbj"))
    tmp.chmod(0o711)
    redis = EmbeddedRedis(tmp / "redis")
    gw = JobsGateway(tmp / "home", redis.ensure_running(), swarm="bench")
    gw.jobs_settings = JobsSettings(pools_file=None, pools=pools())
    gw.start()
    workers: list[WorkerProc] = []
    try:
        gw.tokens = {"bench": gw.add_principal("bench"), "w1": gw.add_principal("w1", "worker")}
        with gw.as_("operator") as op:
            op.post("/api/forge/repos", json={"org": "kswarm", "name": "kernels"}).raise_for_status()
        files = {"kernels/add/add_masked.py": HONEST_ADD}
        sha = push_kernels(gw, tmp, "kswarm/kernels", "bench", "bench/add", files)
        kernel = tmp / "add_masked.py"
        kernel.write_text(HONEST_ADD)
        for pool in ("cpu", "cpu-real"):
            workers.append(WorkerProc(gw, pool, tmp / "w", gw.tokens["w1"]))
        gaps = latency(gw, sha, args.latency_jobs)
        print(
            f"submit→start on an idle pool ({len(gaps)} jobs): p50 {pct(gaps, 50) * 1000:.1f} ms, "
            f"p90 {pct(gaps, 90) * 1000:.1f} ms"
        )
        rate = asyncio.run(throughput(gw, sha, args.submissions, 16))
        print(f"submissions: {rate:.0f}/s ({args.submissions} by 16 concurrent clients, ref resolved each)")
        times = harness_overhead(gw, sha, kernel, args.repeats)
        print(
            f"add (interpreter), median of {args.repeats}: "
            f"bare, the task's cpu trials {times['bare']:.2f} s; "
            f"bare, the harness's {times['trials']:.0f} trials {times['bare_all']:.2f} s; "
            f"harness {times['harness']:.2f} s (child fork to exit {times['child']:.2f} s); "
            f"whole job {times['job']:.2f} s"
        )
        bases = (("the harness's trials", times["bare_all"]), ("the task's cpu trials", times["bare"]))
        for label, base in bases:
            print(
                f"ratios to bare ({label}): harness {times['harness'] / base:.2f}, "
                f"child alone {times['child'] / base:.2f}, job {times['job'] / base:.2f}"
            )
        print(f"job/harness {times['job'] / times['harness']:.2f}")
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"{time.strftime('%Y-%m-%d %H:%M %Z')}, load average {load} (at the start: {started_load})")
    finally:
        for w in workers:
            w.stop()
        gw.stop()
        redis.release()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
