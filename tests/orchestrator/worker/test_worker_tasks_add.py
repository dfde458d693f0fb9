"""``kswarm tasks add DIR``: an operator's own task goes through the forge (a PR to the dataset repo's
protected main, reviewed, merged by the gate), then the board posts it and an already-running worker
verifies a job of it by main's file: no restart. An agent cannot add a task by any door (the CLI with
its token, the REST route, a push to main, Gitea's change-files API on main)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis
from typer.testing import CliRunner

from gateway.client.jobs.models import Job, new_job_id
from gateway.jobs.queue import JobQueue
from kstest.jobkit import HONEST_ADD, JobsGateway, git, push_kernels
from kstest.jobs_fixtures import jobs_gateway
from kstest.waiting import wait_for
from orchestrator.cli.main import app

DATASET = "kswarm/dataset"
CATALOGUE_ADD = (
    Path(__file__).resolve().parents[3] / "gateway/tasks/catalogue/tasks/add/task.py"
).read_text()
# The user's own task: out = 2 * x + y (the catalogue has no such task, so only main can supply it).
AXPY = (
    CATALOGUE_ADD.replace('"""Elementwise add: out = x + y."""', '"""Scaled add: out = 2 * x + y."""')
    .replace('NAME = "add"', 'NAME = "axpy"')
    .replace('ENTRY = "add"', 'ENTRY = "axpy"')
    .replace("out = x + y elementwise", "out = 2 * x + y elementwise")
    .replace("return x + y", "return 2 * x + y")
)
HONEST_AXPY = HONEST_ADD.replace("x + y, mask=mask", "2 * x + y, mask=mask").replace("def add(", "def axpy(")


@pytest.fixture(scope="module")
def jobs_gw(redis_url: str) -> Iterator[JobsGateway]:
    """This module's gateway has the gate (it merges the operator's task PR) and a board following main;
    the dataset repo is seeded (protected dataset main, catalogue tasks, none posted)."""
    with jobs_gateway(redis_url, gate=True) as gw:
        with gw.as_("operator") as op:
            reply = op.post("/api/tasks/seed", json={"repo": DATASET, "post_tasks": False})
            assert reply.status_code == 200, reply.text
        yield gw


def tasks_add(gw: JobsGateway, token: str, *args: str) -> tuple[int, str]:
    env = {"KSWARM_URL": gw.url, "KSWARM_TOKEN": token, "COLUMNS": "200", "NO_COLOR": "1"}
    result = CliRunner().invoke(app, ["tasks", "add", *args], env=env)
    return result.exit_code, result.output


def task_dir(tmp: Path, name: str, text: str) -> Path:
    path = tmp / "mine" / name
    path.mkdir(parents=True, exist_ok=True)
    (path / "task.py").write_text(text)
    return path


def main_head(gw: JobsGateway) -> str:
    with gw.gitea("operator") as api:
        return api.get(f"/repos/{DATASET}/branches/main").json()["commit"]["id"]


def main_has_axpy(gw: JobsGateway) -> bool:
    with gw.as_("operator") as op:
        return op.get("/api/tasks/axpy/definition", params={"repo": DATASET}).status_code == 200


def test_an_agent_cannot_add_a_task_by_any_door(jobs_gw: JobsGateway, tmp_path: Path) -> None:
    head = main_head(jobs_gw)
    directory = task_dir(tmp_path, "axpy", AXPY)
    code, out = tasks_add(jobs_gw, jobs_gw.tokens["alice"], str(directory))
    assert code == 1 and "operator" in out and "Traceback" not in out, out
    body = {"name": "axpy", "task_py": AXPY, "repo": DATASET}
    with jobs_gw.as_("alice") as alice:
        assert alice.post("/api/tasks/definitions", json=body).status_code == 403
    with jobs_gw.as_("w1") as worker:
        assert worker.post("/api/tasks/definitions", json=body).status_code == 403
    # Gitea's change-files API straight onto the protected main
    content = base64.b64encode(AXPY.encode()).decode()
    change = {
        "branch": "main",
        "message": "my own task",
        "files": [{"operation": "create", "path": "tasks/axpy/task.py", "content": content}],
    }
    with jobs_gw.gitea("alice") as api:
        refused = api.post(f"/repos/{DATASET}/contents", json=change)
    assert refused.status_code in (403, 422), refused.text
    # a git push to main
    home, work = tmp_path / "gh", tmp_path / "clone"
    home.mkdir()
    ident = (jobs_gw.tokens["alice"], "alice", f"alice@agents.{jobs_gw.swarm}")
    git(home, *ident, "clone", "-q", f"{jobs_gw.url}/git/{DATASET}.git", str(work))
    (work / "tasks" / "axpy").mkdir()
    (work / "tasks" / "axpy" / "task.py").write_text(AXPY)
    git(home, *ident, "add", "tasks/axpy/task.py", cwd=work)
    git(home, *ident, "commit", "-q", "-m", "my own task", cwd=work)
    with pytest.raises(AssertionError, match="git push"):
        git(home, *ident, "push", "-q", "origin", "main", cwd=work)
    assert main_head(jobs_gw) == head, "nothing reached main"
    with jobs_gw.as_("operator") as op:
        assert op.get("/api/tasks/axpy").status_code == 404
        assert op.get("/api/tasks/axpy/definition", params={"repo": DATASET}).status_code == 404


def test_bad_task_dirs_are_refused_with_one_line(jobs_gw: JobsGateway, tmp_path: Path) -> None:
    token = jobs_gw.operator_token
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out = tasks_add(jobs_gw, token, str(empty))
    assert (code, out.count("\n")) == (2, 1) and "has no task.py" in out, out
    code, out = tasks_add(jobs_gw, token, str(task_dir(tmp_path, "Bad Name", AXPY)))
    assert code == 2 and "bad task name" in out, out
    code, out = tasks_add(jobs_gw, token, str(task_dir(tmp_path, "other", AXPY)))
    assert code == 2 and "NAME" in out, out  # NAME = "axpy" in a directory named other
    code, out = tasks_add(jobs_gw, token, str(task_dir(tmp_path, "axpy", "def reference(:\n")))
    assert code == 2 and "Traceback" not in out, out
    # The harness's own check runs first: a task must declare its input domain, its shapes inside it.
    start, end = AXPY.index("DOMAIN = {"), AXPY.index("}\n", AXPY.index('"special_values"')) + 2
    code, out = tasks_add(jobs_gw, token, str(task_dir(tmp_path, "axpy", AXPY[:start] + AXPY[end:])))
    assert code == 2 and "declares no DOMAIN" in out, out
    narrow = AXPY.replace('"n": [1, 67108864]', '"n": [1, 4096]')
    code, out = tasks_add(jobs_gw, token, str(task_dir(tmp_path, "axpy", narrow)))
    assert code == 2 and "is outside its DOMAIN" in out and "Traceback" not in out, out
    # kswarm/kernels is not a trusted dataset repo: a task there would not be the workers'
    code, out = tasks_add(jobs_gw, token, str(task_dir(tmp_path, "axpy", AXPY)), "--repo", "kswarm/kernels")
    assert code == 1 and "not a trusted dataset branch" in out, out
    # the catalogue's add, unchanged, is already main's file
    code, out = tasks_add(jobs_gw, token, str(task_dir(tmp_path, "add", CATALOGUE_ADD)))
    assert code == 1 and "already this file" in out, out


def queue_job(gw: JobsGateway, kernel: str, sha: str, pool: str) -> str:
    """Queue a job of ``kernel`` at ``sha`` as the gateway's submission does once it has accepted one,
    past its task check (which still looks only at the pool's catalogue: see
    ``test_submission_accepts_a_job_of_an_added_task``)."""

    async def submit() -> str:
        redis = Redis.from_url(gw.redis_url, decode_responses=True)
        try:
            job = Job(
                id=new_job_id(), submitter="alice", repo=DATASET, ref=sha, sha=sha, task="axpy",
                kernel=kernel, pool=pool, devices=1, timeout_s=300, submitted=time.time(),
            )  # fmt: skip
            return (await JobQueue(redis).submit(job, 10)).id
        finally:
            await redis.aclose()

    return asyncio.run(submit())


def propose_and_merge(gw: JobsGateway, tmp: Path) -> tuple[int, str]:
    """``kswarm tasks add`` as the operator, bob's approval, the gate's merge: (PR number, main's head)."""
    directory = str(task_dir(tmp, "axpy", AXPY))
    code, out = tasks_add(gw, gw.operator_token, directory, "--reviewer", "bob", "--json")
    assert code == 0, out
    proposed = json.loads(out)
    assert (proposed["repo"], proposed["task"], proposed["update"]) == (DATASET, "axpy", False)
    assert proposed["branch"].startswith("operator/task-axpy-") and proposed["reviewers"] == ["bob"]
    number = proposed["pr"]
    with gw.gitea("operator") as api:
        pr = api.get(f"/repos/{DATASET}/pulls/{number}").json()
        files = api.get(f"/repos/{DATASET}/pulls/{number}/files").json()
    assert pr["user"]["login"] == "operator" and not pr["merged"]
    assert {f["filename"] for f in files} == {"tasks/axpy/task.py", "kernels/axpy/README.md"}
    # versioned and reviewed: an agent's approval, then the gate merges the operator's change to tasks/
    with gw.gitea("bob") as api:
        review = api.post(
            f"/repos/{DATASET}/pulls/{number}/reviews",
            json={"event": "APPROVED", "commit_id": pr["head"]["sha"]},
        )
    assert review.status_code == 200, review.text

    def merged() -> dict | None:
        with gw.gitea("operator") as api:
            view = api.get(f"/repos/{DATASET}/pulls/{number}").json()
        return view if view["merged"] else None

    view = wait_for(merged, timeout=60, what=f"the gate merging PR #{number}")
    assert view["merged_by"]["login"] == "gate"
    return number, main_head(gw)


@pytest.mark.slow
def test_an_added_task_is_merged_posted_and_verified_without_a_restart(
    jobs_gw: JobsGateway, workers, short_tmp: Path, tmp_path: Path
) -> None:
    worker = workers("cpu-real")  # running before the task exists, never restarted
    kernel = "kernels/axpy/alice_v1.py"
    sha = push_kernels(jobs_gw, short_tmp, DATASET, "alice", "alice/axpy", {kernel: HONEST_AXPY})
    early = jobs_gw.wait_job(queue_job(jobs_gw, kernel, sha, "cpu-real"), ("succeeded", "failed", "error"))
    assert early["state"] == "error" and "no task 'axpy'" in (early["error"] or ""), early

    _, merge_sha = propose_and_merge(jobs_gw, tmp_path)
    with jobs_gw.gitea("operator") as api:
        on_main = api.get(f"/repos/{DATASET}/contents/tasks/axpy/task.py", params={"ref": "main"}).json()
    assert base64.b64decode(on_main["content"]).decode() == AXPY

    def posted() -> dict | None:
        with jobs_gw.as_("operator") as op:
            reply = op.get("/api/tasks/axpy")
        return reply.json() if reply.status_code == 200 else None

    task = wait_for(posted, timeout=30, what="the board posting axpy")
    assert (task["state"], task["posted_by"], task["repo"]) == ("open", "board", DATASET)
    assert "2 * x + y" in task["description"]

    job_id = queue_job(jobs_gw, kernel, sha, "cpu-real")
    job = jobs_gw.wait_job(job_id, ("succeeded", "failed", "error"), timeout=240)
    assert (job["state"], job["verdict"]) == ("succeeded", "pass"), (job, worker.output()[-3000:])
    assert job["result"]["task_source"] == {
        "source": "repo",
        "repo": DATASET,
        "commit": merge_sha,
        "path": "tasks/axpy/task.py",
        "blob_sha": on_main["sha"],
    }
    assert on_main["sha"] == hashlib.sha1(b"blob %d\0" % len(AXPY.encode()) + AXPY.encode()).hexdigest()
    assert worker.proc.poll() is None, "the same worker process throughout"


def test_submission_accepts_a_job_of_an_added_task(
    jobs_gw: JobsGateway, short_tmp: Path, tmp_path: Path
) -> None:
    if not main_has_axpy(jobs_gw):  # the test above merged it, unless it was deselected
        propose_and_merge(jobs_gw, tmp_path)
    assert main_has_axpy(jobs_gw)
    kernel = "kernels/axpy/alice_v2.py"
    sha = push_kernels(jobs_gw, short_tmp, DATASET, "alice", "alice/axpy2", {kernel: HONEST_AXPY})
    reply = jobs_gw.submit("alice", kernel=kernel, repo=DATASET, ref=sha, pool="cpu-real")
    assert reply.status_code == 201, reply.text
