"""A gateway with the forge (gate bot), the job runner and counterexamples, a dataset repo with one
accepted kernel, and a worker principal that takes and finishes jobs over the workers' wire."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from gateway.counterexamples.plugin import CounterexamplesPlugin
from gateway.counterexamples.settings import CounterexampleSettings
from gateway.forge.plugin import ForgePlugin
from gateway.forge.settings import ForgeSettings
from gateway.jobs.plugin import JobsPlugin
from gateway.plugin import Plugin
from gateway.plugins import default_plugins, replace_plugins
from kstest.jobkit import JobsGateway, git
from kstest.waiting import wait_for

REPO = "kswarm/dataset"
KERNEL = "kernels/add/alice_block.py"
POLICY = {
    "required_approvals": 1,
    "required_checks": ["kswarm/verify:cpu"],
    "min_evidence": "cpu-shapes-only",
    "protected_branches": ["main"],
    "dataset": True,
}
INPUT = {"case": {"n": 4097}, "dtype": "float32", "seed": 3}


class CxGateway(JobsGateway):
    """Forge with a fast gate, jobs, counterexamples (at most 2 pending per agent)."""

    accepted = ""  # the accepted kernel's sha (``accept_kernel``)
    regression_path: str | None = None  # the merged regression case, once a test made one

    def plugins(self) -> list[Plugin[Any]]:
        forge = ForgePlugin(ForgeSettings(gate_sweep_s=0.5))
        cx = CounterexamplesPlugin(CounterexampleSettings(dataset_repo=REPO, max_pending_per_agent=2))
        return replace_plugins(default_plugins(), forge, JobsPlugin(self.jobs_settings), cx)

    def take(self, worker: str = "w1") -> dict[str, Any]:
        """The next cpu job, as a worker process would take it."""
        body = {"instance": "i0", "node": "local", "free_devices": 1, "free_ids": ["0"], "wait_s": 5}

        def taken() -> dict[str, Any] | None:
            with self.as_(worker) as c:
                reply = c.post("/api/jobs/pools/cpu/take", json=body)
            assert reply.status_code in (200, 204), reply.text
            return reply.json() if reply.status_code == 200 else None

        return wait_for(taken, what="a job to take")

    def take_job(self, job_id: str, worker: str = "w1") -> dict[str, Any]:
        """Job ``job_id``, as a worker takes it: the jobs handed out before it are left taken. The heal
        queues re-verifications of its own (a regression case an earlier test merged), at any time."""
        for _ in range(20):
            assignment = self.take(worker)
            if assignment["job"]["id"] == job_id:
                return assignment
        raise AssertionError(f"job {job_id} was not handed out among the next 20")

    def finish(
        self, assignment: dict[str, Any], verdict: str, result: dict[str, Any], who: str = "w1"
    ) -> httpx.Response:
        state = {"pass": "succeeded", "fail": "failed", "error": "error"}[verdict]
        body = {
            "instance": "i0",
            "attempt": assignment["attempt"],
            "state": state,
            "verdict": verdict,
            "error": None if verdict == "pass" else "; ".join(result.get("reasons", [])) or verdict,
            "exit_code": {"pass": 0, "fail": 1, "error": 2}[verdict],
            "result": {"verdict": verdict, **result},
        }
        with self.as_(who) as c:
            return c.post(f"/api/jobs/{assignment['job']['id']}/finish", json=body)

    def pr(self, number: int) -> dict[str, Any]:
        with self.as_("operator") as op:
            reply = op.get(f"/api/forge/repos/{REPO}/pulls/{number}")
        assert reply.status_code == 200, reply.text
        return reply.json()

    def open_pr(self, who: str, branch: str) -> int:
        body = {"head": branch, "base": "main", "title": branch, "reviewers": ["bob"]}
        with self.gitea(who) as api:
            reply = api.post(f"/repos/{REPO}/pulls", json=body)
        assert reply.status_code == 201, reply.text
        return int(reply.json()["number"])

    def approve(self, who: str, number: int) -> None:
        with self.gitea(who) as api:
            reply = api.post(f"/repos/{REPO}/pulls/{number}/reviews", json={"event": "APPROVED"})
        assert reply.status_code == 200, reply.text

    def inbox(self, who: str) -> list[str]:
        with self.as_(who) as c:
            return [i["text"] for i in c.get("/api/inbox", params={"peek": "true"}).json()["items"]]

    def cx(self, cx_id: str, who: str = "operator") -> dict[str, Any]:
        with self.as_(who) as c:
            reply = c.get(f"/api/counterexamples/{cx_id}")
        assert reply.status_code == 200, reply.text
        return reply.json()

    def submit_cx(self, who: str, **body: Any) -> httpx.Response:
        with self.as_(who) as c:
            return c.post("/api/counterexamples", json=body)


def commit_on_branch(
    gw: CxGateway, tmp: Path, who: str, branch: str, files: dict[str, bytes | None], base: str = "main"
) -> str:
    """As agent ``who``: clone, branch off ``base``, write (None: delete) ``files``, push; the sha."""
    home, work = tmp / f"h-{who}", tmp / f"w-{who}-{branch.replace('/', '-')}-{time.monotonic_ns()}"
    home.mkdir(parents=True, exist_ok=True)
    ident = (gw.tokens[who], who, f"{who}@agents.{gw.swarm}")
    git(home, *ident, "clone", "-q", f"{gw.url}/git/{REPO}.git", str(work))
    git(home, *ident, "checkout", "-q", "-b", branch, f"origin/{base}", cwd=work)
    for path, content in files.items():
        if content is None:
            git(home, *ident, "rm", "-q", path, cwd=work)
            continue
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_bytes(content)
        git(home, *ident, "add", path, cwd=work)
    git(home, *ident, "commit", "-q", "-m", f"changes on {branch}", cwd=work)
    git(home, *ident, "push", "-q", "origin", branch, cwd=work)
    return git(home, *ident, "rev-parse", "HEAD", cwd=work)


def show(gw: CxGateway, tmp: Path, ref: str, path: str) -> tuple[bytes, str]:
    """(the file's bytes at ``ref`` of the dataset repo, that ref's commit author ``name <email>``)."""
    home, work = tmp / "h-show", tmp / f"show-{time.monotonic_ns()}"
    home.mkdir(parents=True, exist_ok=True)
    ident = (gw.operator_token, "operator", "operator@kswarm")
    git(home, *ident, "clone", "-q", f"{gw.url}/git/{REPO}.git", str(work))
    author = git(home, *ident, "log", "-1", "--format=%an <%ae>", f"origin/{ref}", cwd=work)
    shown = subprocess.run(["git", "show", f"origin/{ref}:{path}"], cwd=work, capture_output=True, check=True)
    return shown.stdout, author


def accept_kernel(gw: CxGateway, tmp: Path) -> str:
    """alice's add kernel, verified (a passing cpu job at its head), approved by bob, merged by the gate:
    an accepted kernel. Its sha."""
    sha = commit_on_branch(gw, tmp, "alice", "alice/add", {KERNEL: b"# standin: verdict pass\n"})
    number = gw.open_pr("alice", "alice/add")
    with gw.as_("alice") as c:
        reply = c.post("/api/jobs", json={"kernel": KERNEL, "ref": sha, "repo": REPO})
    assert reply.status_code == 201, reply.text
    assignment = gw.take()
    assert assignment["job"]["id"] == reply.json()["id"]
    assert gw.finish(assignment, "pass", {}).json()["recorded"]
    gw.approve("bob", number)
    wait_for(lambda: gw.pr(number)["state"] == "merged", what="the gate to merge alice's kernel")
    return sha
