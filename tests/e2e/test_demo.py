"""``kswarm demo`` end to end, as a newcomer runs it (three tasks instead of eight, ``--keep`` so that the
result can be inspected live), then checked from the outside: the dataset, main in a fresh clone over
/git, the harness run again on the merged files, commit authors, reviewers and the gate's audit."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.tasks import catalogue
from kstest.cli import KSWARM, cli_env, kswarm
from kstest.gateway import free_port

# softmax: the faulty first attempt and the red team's target; three tasks keep both developers busy at once
TASKS = ("add", "softmax", "sum_rows")
REPO = "kswarm/dataset"
SWARM = "demo"
DEMO = [KSWARM, "demo"]


class Demo:
    """``kswarm demo --keep`` in the background; stopped with SIGTERM (what Ctrl-C and `kswarm down` do)."""

    def __init__(self, home: Path, port: int) -> None:
        self.home, self.port = home, port
        self.log = home.parent / "demo.log"
        argv = [*DEMO, "--keep", "--home", str(home), "--port", str(port), "--tasks", ",".join(TASKS)]
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(argv, env=cli_env(home), stdout=out, stderr=subprocess.STDOUT)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def wait_summary(self, timeout: float) -> dict[str, Any]:
        path = self.home / "demo" / "summary.json"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if path.exists():
                return json.loads(path.read_text())
            if self.proc.poll() is not None:
                raise AssertionError(f"kswarm demo exited {self.proc.returncode}:\n{self.output()}")
            time.sleep(1)
        raise AssertionError(f"no summary after {timeout:.0f}s:\n{self.output()}")

    def stop(self, timeout: float = 120) -> int:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def verify(task: str, kernel: Path, out: Path) -> tuple[str, int, str]:
    """The harness again, in its own process, on a merged file."""
    argv = [sys.executable, "-m", "orchestrator.verify", "--task", str(catalogue.task_dir(task))]
    argv += ["--candidate", str(kernel), "--pool", "cpu", "--no-timing", "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    return task, done.returncode, done.stdout + done.stderr


def pids_alive(pids: list[int]) -> list[int]:
    return [p for p in pids if Path(f"/proc/{p}").exists()]


@pytest.mark.slow
def test_the_demo_builds_a_verified_dataset_and_only_reviewed_kernels_reach_main(short_tmp: Path) -> None:
    home = short_tmp / "h"
    demo = Demo(home, free_port())
    try:
        summary = demo.wait_summary(timeout=600)
        assert summary["ok"], demo.output()
        token = (home / "operator.token").read_text().strip()
        api = httpx.Client(base_url=demo.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        agent_pids = [
            json.loads(p.read_text())["pid"] for p in (home / "swarm" / "agents").glob("*.proc.json")
        ]
        assert len(agent_pids) == 5  # the lead, two developers, a reviewer and the red team

        # The dataset: an accepted record per task at least, each reviewed by someone else.
        rows = [
            json.loads(line) for line in Path(summary["dataset"]["paths"]["jsonl"]).read_text().splitlines()
        ]
        accepted = [r for r in rows if r["accepted"]]
        assert len(accepted) >= len(TASKS) and {r["task"] for r in accepted} == set(TASKS)
        for row in accepted:
            assert row["author"] and row["reviewers"] and row["author"] not in row["reviewers"], row
            assert row["approvers"] and row["author"] not in row["approvers"], row
        rejected = [r for r in rows if r["task"] == "softmax" and r["status"] == "rejected"]
        assert len(rejected) == 1 and "mismatch" in rejected[0]["flags"] and not rejected[0]["accepted"]

        # The red team's loop (issue 27): the unstable softmax merged, a confirmed counterexample became a
        # regression case, the kernel was withdrawn (its record stays), and the honest one was accepted
        # again and survived the red team's next counterexample.
        unstable_sha = hashlib.sha256(catalogue.unstable_solution_path("softmax").read_bytes()).hexdigest()
        withdrawn = [r for r in rows if r["status"] == "withdrawn"]
        assert len(withdrawn) == 1 and withdrawn[0]["task"] == "softmax" and not withdrawn[0]["accepted"]
        assert withdrawn[0]["kernel_sha256"] == unstable_sha
        cxs = api.get("/api/counterexamples", params={"repo": REPO}).json()
        cxs.sort(key=lambda c: c["created_at"])
        assert [c["status"] for c in cxs] == ["confirmed", "refused"], cxs
        confirmed, refused = cxs
        assert confirmed["finder"] == "red-1" and confirmed["regression_merged"] and confirmed["withdrew"]
        assert withdrawn[0]["withdrawal"]["counterexample"] == confirmed["id"]
        assert "right on this input" in " ".join(refused["reasons"]), refused
        softmax_accepted = [r for r in accepted if r["task"] == "softmax"]
        honest_sha = hashlib.sha256(catalogue.solution_path("softmax").read_bytes()).hexdigest()
        assert [r["kernel_sha256"] for r in softmax_accepted] == [honest_sha]
        card = Path(summary["dataset"]["paths"]["card"]).read_text()
        assert "withdrawn" in card.lower() and confirmed["id"] in card

        # main in a fresh clone over /git: the merged files are the accepted records' kernels ...
        clone = short_tmp / "clone"
        auth = f"http.extraHeader=Authorization: Bearer {token}"
        subprocess.run(
            ["git", "-c", auth, "clone", "-q", f"{demo.url}/git/{REPO}.git", str(clone)], check=True
        )
        for row in accepted:
            merged = clone / row["kernel_path"]
            assert hashlib.sha256(merged.read_bytes()).hexdigest() == row["kernel_sha256"], row["kernel_path"]
        # ... and the wrong kernel never reached main: neither its commit nor its file is in main's history.
        history = set(git(clone, "rev-list", "--objects", "origin/main").split())
        assert rejected[0]["commit"] not in history
        wrong_blob = git(clone, "hash-object", str(catalogue.wrong_solution_path("softmax")))
        assert wrong_blob not in history

        # Every merged commit was authored and committed by the agent that pushed it; merges by the gate.
        prs = api.get("/api/forge/pulls", params={"repo": REPO, "state": "all"}).json()
        merged_prs = [p for p in prs if p["state"] == "merged"]
        # every task's PR, the regression case's PR (by the red team) and the honest softmax's new PR
        assert len(merged_prs) == len(TASKS) + 2 and not [p for p in prs if p["state"] != "merged"]
        regression = [p for p in merged_prs if p["head"] == f"red-1/regression-{confirmed['id']}"]
        assert len(regression) == 1 and regression[0]["author"] == "red-1"
        for pr in merged_prs:
            view = api.get(f"/api/forge/repos/{REPO}/pulls/{pr['number']}").json()
            assert pr["head"].startswith(f"{pr['author']}/")  # pushed under its own namespace
            own = git(
                clone, "log", "--no-merges", "--format=%ae %ce", f"{view['merge_sha']}^1..{view['head_sha']}"
            )
            email = f"{pr['author']}@agents.{SWARM}"
            assert own and set(own.splitlines()) == {f"{email} {email}"}, (pr, own)
            assert git(clone, "log", "-1", "--format=%ae", view["merge_sha"]) == f"gate@bots.{SWARM}"
            # The gate's audit explains the merge: the head it merged and who approved it.
            merges = [a for a in view["audit"] if a["action"] == "merged"]
            assert len(merges) == 1 and merges[0]["head_sha"] == view["head_sha"], view["audit"]
            assert merges[0]["approvals"] and pr["author"] not in merges[0]["approvals"]
            approved = {r["user"] for r in view["reviews"] if r["state"] == "APPROVED"}
            assert approved == set(merges[0]["approvals"])
        softmax = min((p for p in merged_prs if p["head"].endswith("/softmax")), key=lambda p: p["number"])
        why = kswarm(home, "pr", "why", str(softmax["number"]), "--repo", REPO)
        assert why.returncode == 0 and "merged" in why.stdout, why.stdout + why.stderr
        view = api.get(f"/api/forge/repos/{REPO}/pulls/{softmax['number']}").json()
        states = [(r["state"], r["commit_id"]) for r in view["reviews"]]
        assert ("REQUEST_CHANGES", rejected[0]["commit"]) in states and (
            "APPROVED",
            view["head_sha"],
        ) in states

        # The web UI the summary points at shows the PRs.
        page = api.get("/ui/prs")
        assert page.status_code == 200 and "softmax" in page.text

        # What each agent cost: the scripted model is served behind the LLM proxy, which booked every call
        # of every agent; the accepted kernels carry what their authors spent on them.
        usage = api.get("/api/usage").json()
        assert set(usage["agents"]) >= {"lead", "dev-1", "dev-2", "rev-1", "red-1"}, usage
        for name, spent in usage["agents"].items():
            booked = (spent["requests"], spent["total_tokens"], spent["cost_usd"])
            assert all(n > 0 for n in booked), (name, spent)
        assert usage["swarm"]["cost_usd"] > 0
        # (The honest softmax written after the withdrawal was written while its task stood done on the
        # board: the proxy booked that wake to no task, so its row has no cost -- docs/dataset.md.)
        held = [r for r in accepted if r["kernel_sha256"] != honest_sha or r["task"] != "softmax"]
        assert all(r["cost_usd"] and r["cost_usd"] > 0 for r in held), [r["cost_usd"] for r in accepted]
        agent_page = api.get("/ui/agents/dev-1", headers={"Accept": "text/html"}).text
        assert re.search(r"All time</th><td>[1-9][\d,]* tokens", agent_page), "dev-1's page shows its cost"

        # The harness, run again on the merged files, passes every one (two at a time: two cores).
        with ThreadPoolExecutor(2) as pool:
            results = list(
                pool.map(
                    lambda r: verify(r["task"], clone / r["kernel_path"], short_tmp / f"{r['task']}.json"),
                    accepted,
                )
            )
        assert [(t, code) for t, code, _ in results] == [(r["task"], 0) for r in accepted], results
        api.close()
    finally:
        code = demo.stop()
    assert code == 0, demo.output()
    out = demo.output()
    assert "stopped." in out and "kswarm down" in out  # --keep said how to stop it
    assert not (home / "gateway.json").exists()
    assert pids_alive(agent_pids) == []
    # Nothing it started is left: Redis, the job worker (both name the home on their command line).
    left = [_cmdline(p) for p in Path("/proc").iterdir() if p.name.isdigit() and str(home) in _cmdline(p)]
    assert left == []


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
