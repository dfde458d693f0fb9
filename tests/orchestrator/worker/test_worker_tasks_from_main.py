"""Workers judge a job by the task on the dataset repo's protected main, never by the PR's head.

The dataset repo is seeded (``tasks/<name>/task.py`` on a protected dataset ``main``); an agent's branch
carries a weaker ``tasks/add/task.py`` (a stand-in reference that passes everything, or, with the real
harness, a reference computing ``x - y``) next to a kernel that is wrong for main's task. The job fails,
its result names main's blob, and the PR is blocked for touching the trusted path. A task changed on
main reaches the next job without a restart, through the worker's cache keyed by blob sha.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import pytest

from gateway.client import AsyncGatewayClient, GatewayTarget
from gateway.client.jobs.models import Job
from gateway.client.jobs.pools import PoolConfig
from kstest.jobkit import HONEST_ADD, JobsGateway, push_kernels
from orchestrator.worker.tasks import TaskCache, TaskUnavailable, blob_sha

DATASET = "kswarm/dataset"
CATALOGUE_ADD = (
    Path(__file__).resolve().parents[3] / "gateway/tasks/catalogue/tasks/add/task.py"
).read_text()
WEAKER_ADD = CATALOGUE_ADD.replace("return x + y", "return x - y") + "\n# standin-task: verdict pass\n"


@pytest.fixture(scope="module")
def dataset(jobs_gw: JobsGateway) -> dict[str, Any]:
    """The seeded dataset repo and main's tasks/add/task.py as Gitea's contents API shows it."""
    with jobs_gw.as_("operator") as op:
        reply = op.post("/api/tasks/seed", json={"repo": DATASET, "post_tasks": False})
        assert reply.status_code == 200, reply.text
    return main_file(jobs_gw, "tasks/add/task.py")


def main_file(gw: JobsGateway, path: str) -> dict[str, Any]:
    with gw.gitea("operator") as api:
        reply = api.get(f"/repos/{DATASET}/contents/{path}", params={"ref": "main"})
        head = api.get(f"/repos/{DATASET}/branches/main").json()["commit"]["id"]
    assert reply.status_code == 200, reply.text
    return {**reply.json(), "head": head}


def test_a_pr_with_a_weaker_task_is_judged_by_mains_and_blocked(
    jobs_gw: JobsGateway, dataset: dict[str, Any], workers, short_tmp: Path
) -> None:
    kernel = "kernels/add/alice_cheat.py"
    files = {kernel: "# standin: verdict fail\n", "tasks/add/task.py": WEAKER_ADD}
    sha = push_kernels(jobs_gw, short_tmp, DATASET, "alice", "alice/weaker-task", files)
    submitted = jobs_gw.submit("alice", kernel=kernel, repo=DATASET, ref="alice/weaker-task", pool="cpu")
    assert submitted.status_code == 201, submitted.text
    workers("cpu")
    job = jobs_gw.wait_job(submitted.json()["id"], ("succeeded", "failed", "error"))
    assert (job["state"], job["verdict"]) == ("failed", "fail"), job
    source = job["result"]["task_source"]
    assert source == {
        "source": "repo",
        "repo": DATASET,
        "commit": dataset["head"],
        "path": "tasks/add/task.py",
        "blob_sha": dataset["sha"],
    }
    mains = base64.b64decode(dataset["content"])
    assert job["result"]["task_sha256"] == hashlib.sha256(mains).hexdigest(), "the harness got main's file"
    assert job["result"]["task_sha256"] != hashlib.sha256(WEAKER_ADD.encode()).hexdigest()
    with jobs_gw.gitea("alice") as alice:
        number = alice.post(
            f"/repos/{DATASET}/pulls",
            json={"head": "alice/weaker-task", "base": "main", "title": "faster add"},
        ).json()["number"]
    with jobs_gw.as_("operator") as op:
        view = op.get(f"/api/forge/repos/{DATASET}/pulls/{number}").json()
    assert view["head_sha"] == sha
    blocked = [r for r in view["gate"]["reasons"] if r["code"] == "trusted-path"]
    assert blocked and "tasks/add/task.py" in blocked[0]["message"] and blocked[0]["blocking"]


@pytest.mark.slow
def test_the_real_harness_judges_by_mains_reference(
    jobs_gw: JobsGateway, dataset: dict[str, Any], workers, short_tmp: Path
) -> None:
    """A kernel computing x - y and a PR task whose reference is x - y: main's add says x + y."""
    kernel = "kernels/add/alice_minus.py"
    minus = HONEST_ADD.replace("x + y, mask=mask", "x - y, mask=mask")
    assert minus != HONEST_ADD
    files = {kernel: minus, "tasks/add/task.py": WEAKER_ADD}
    push_kernels(jobs_gw, short_tmp, DATASET, "alice", "alice/minus", files)
    submitted = jobs_gw.submit("alice", kernel=kernel, repo=DATASET, ref="alice/minus", pool="cpu-real")
    assert submitted.status_code == 201, submitted.text
    workers("cpu-real")
    job = jobs_gw.wait_job(submitted.json()["id"], ("succeeded", "failed", "error"), timeout=240)
    assert (job["state"], job["verdict"]) == ("failed", "fail"), job
    assert "mismatch" in job["result"]["flags"] or any("mismatch" in str(r) for r in job["result"]["reasons"])
    assert job["result"]["task_source"]["blob_sha"] == dataset["sha"]


def job_for(task: str, repo: str = DATASET) -> Job:
    return Job(
        id="jtest", submitter="alice", repo=repo, ref="main", sha="0" * 40, task=task,
        kernel=f"kernels/{task}/alice.py", pool="cpu", devices=1, timeout_s=60, submitted=0.0,
    )  # fmt: skip


async def test_the_cache_follows_main_and_the_pools_own_dir_wins(
    jobs_gw: JobsGateway, dataset: dict[str, Any], tmp_path: Path
) -> None:
    cache = TaskCache(tmp_path / "tasks")
    pool = PoolConfig(name="cpu")
    target = GatewayTarget(token=jobs_gw.tokens["w1"], url=jobs_gw.url)
    async with AsyncGatewayClient(target) as gateway:
        task_dir, source = await cache.for_job(pool, job_for("add"), gateway)
        assert (task_dir / "task.py").read_bytes() == base64.b64decode(dataset["content"])
        assert (
            task_dir == tmp_path / "tasks" / dataset["sha"] / "add" and source["blob_sha"] == dataset["sha"]
        )
        assert not (task_dir / "task.py").stat().st_mode & 0o222, "read-only"

        def no_fetch(*_: object) -> Path:
            raise AssertionError("a cached blob is not fetched again")

        cache.store = no_fetch  # type: ignore[method-assign]
        again, _ = await cache.for_job(pool, job_for("add"), gateway)
        assert again == task_dir
        # a corrupted cache entry is not used: it is fetched (and here: refused) again
        (task_dir / "task.py").chmod(0o644)
        (task_dir / "task.py").write_text("tampered\n")
        with pytest.raises(AssertionError, match="not fetched again"):
            await cache.for_job(pool, job_for("add"), gateway)
        # a repo that is not a trusted dataset branch never supplies tasks: the catalogue does
        _, fallback = await TaskCache(tmp_path / "t1").for_job(
            pool, job_for("add", "kswarm/kernels"), gateway
        )
        assert fallback["source"] == "catalogue" and fallback["blob_sha"] == blob_sha(CATALOGUE_ADD.encode())
        with pytest.raises(TaskUnavailable, match="no task 'nosuch'"):
            await TaskCache(tmp_path / "t2").for_job(pool, job_for("nosuch"), gateway)
    # an operator-local pool reads its own dir and nothing else
    local = tmp_path / "local" / "add"
    local.mkdir(parents=True)
    (local / "task.py").write_text("# the operator's own add\n")
    operator_pool = PoolConfig(name="cpu", tasks_dir=local.parent)
    own_dir, own = await TaskCache(tmp_path / "t3").for_job(operator_pool, job_for("add"), None)  # type: ignore[arg-type]
    assert own_dir == local.resolve() and own["source"] == "pool"
