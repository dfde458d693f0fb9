"""The demo's driver, as the operator: set the stage, kick off, watch, build the dataset, sum up.

1. Seed the dataset repo (catalogue template, no tasks posted: the lead posts them) and the knowledge
   base; protect ``main`` of the dataset repo with 1 approval and a green ``kswarm/verify:cpu``.
2. Wait for every agent's first heartbeat, then DM the lead the kick-off: tasks and team.
3. Poll the gateway (tasks, PRs with reviews, jobs, agents, chat) into snapshots for the progress
   view, until every task is done on the board (or the time is up).
4. Build the dataset (``kswarm dataset build``'s code), write ``<home>/demo/summary.json``, print the
   summary: per task the author, PR, reviewers, job verdicts and merge; the dataset's paths and counts.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

from gateway.client import AsyncGatewayClient, GatewayTarget
from gateway.tasks import catalogue
from orchestrator.demo.launcher import Running
from orchestrator.demo.progress import ProgressView, Snapshot
from orchestrator.demo.spec import CHECK, DATASET_REPO, POOL

POLL_S = 1.0


class DemoError(RuntimeError):
    """The demo could not go on; the message says why."""


@dataclass(frozen=True)
class DemoOptions:
    tasks: tuple[str, ...]
    timeout_s: float
    keep: bool


def operator_client(running: Running) -> AsyncGatewayClient:
    """The gateway's REST API as the operator (a refusal raises the client's ``GatewayCallError``)."""
    return AsyncGatewayClient(GatewayTarget(token=running.operator_token, url=running.url, timeout=60))


async def set_stage(api: AsyncGatewayClient) -> None:
    await api.request("POST", "/api/tasks/seed", json={"repo": DATASET_REPO, "post_tasks": False})
    await api.request("POST", "/api/kb/seed")
    org, _, repo = DATASET_REPO.partition("/")
    policy = {
        "required_approvals": 1,
        # cpu-only: the demo has no device pool, so its kernels merge on the cpu pool's pass, and only a
        # screened one (the task's device shapes sampled): cpu-screened, never device-verified.
        "required_checks": [CHECK],
        "min_evidence": "cpu-screened",
        "protected_branches": ["main"],
        "dataset": True,
    }
    await api.request("PUT", f"/api/forge/repos/{org}/{repo}/policy", json=policy)


async def wait_for_agents(
    api: AsyncGatewayClient, names: tuple[str, ...], view: ProgressView, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    seen: set[str] = set()
    while True:
        agents = {a["name"]: a for a in await api.get("/api/agents")}
        for name in names:
            if name not in seen and (agents.get(name) or {}).get("last_heartbeat"):
                seen.add(name)
                view.log(f"[bold]{name}[/] is up ({agents[name].get('state') or 'starting'})")
        if seen >= set(names):
            return
        if time.monotonic() > deadline:
            missing = ", ".join(sorted(set(names) - seen))
            raise DemoError(
                f"agents did not start within {timeout_s:.0f}s: {missing} (see `kswarm logs NAME`)"
            )
        await asyncio.sleep(POLL_S)


def kickoff_text(running: Running, tasks: tuple[str, ...]) -> str:
    roster = running.roster
    return (
        f"Kick-off: post these tasks for {DATASET_REPO} on the board and get the team going. "
        f"Tasks: {', '.join(tasks)}. Developers: {', '.join(roster.developers)}. "
        f"Reviewers: {', '.join(roster.reviewers)}. Every kernel is verified by a job on the {POOL} pool "
        "and merged only with a reviewer's approval."
    )


class Watcher:
    """Polls the gateway into snapshots; PR views and finished jobs are fetched once they settle."""

    def __init__(self, api: AsyncGatewayClient) -> None:
        self.api = api
        self.started = time.monotonic()
        self.views: dict[int, dict[str, Any]] = {}
        self.finished: dict[str, dict[str, Any]] = {}

    async def snapshot(self) -> Snapshot:
        api = self.api
        tasks = {t["id"]: t for t in await api.get("/api/tasks")}
        prs: dict[int, dict[str, Any]] = {}
        for pr in await api.get("/api/forge/pulls", repo=DATASET_REPO, state="all"):
            n = pr["number"]
            old = self.views.get(n)
            if old is None or pr["state"] == "open" or old.get("state") != pr["state"]:
                org, _, name = DATASET_REPO.partition("/")
                self.views[n] = await api.get(f"/api/forge/repos/{org}/{name}/pulls/{n}")
            prs[n] = self.views[n]
        jobs: dict[str, dict[str, Any]] = {}
        for job in await api.get("/api/jobs", limit=500):
            jid = job["id"]
            if job["state"] in ("queued", "running"):
                jobs[jid] = job
                continue
            if jid not in self.finished:
                self.finished[jid] = await api.get(f"/api/jobs/{jid}")
            jobs[jid] = self.finished[jid]
        agents = {a["name"]: a for a in await api.get("/api/agents")}
        messages: list[dict[str, Any]] = []
        for channel in ("general", "reviews"):
            messages += (await api.get(f"/api/channels/{channel}/messages", limit=10))["messages"]
        messages.sort(key=lambda m: m["ts"])
        found = await api.get("/api/counterexamples", repo=DATASET_REPO)
        counterexamples = sorted(found, key=lambda c: c["created_at"])
        return Snapshot(time.monotonic() - self.started, tasks, prs, jobs, agents, messages, counterexamples)


def finished(snap: Snapshot, tasks: tuple[str, ...], attacked: frozenset[str] = frozenset()) -> bool:
    """Every task done and no PR open; and for each task the red team attacks, its last counterexample
    was refused: the kernel that stands now survived it (a confirmed one starts the heal: a regression
    PR, re-verification, a withdrawal and the author's new kernel, which is attacked in turn)."""
    if not all(snap.tasks.get(t, {}).get("state") == "done" for t in tasks):
        return False
    if any(p.get("state") == "open" for p in snap.prs.values()):
        return False
    for task in attacked & set(tasks):
        last = [c for c in snap.counterexamples if c.get("task") == task][-1:]
        if not last or last[0].get("status") != "refused":
            return False
    return True


async def watch(
    api: AsyncGatewayClient, options: DemoOptions, view: ProgressView, attacked: frozenset[str] = frozenset()
) -> tuple[Snapshot, bool]:
    watcher = Watcher(api)
    deadline = time.monotonic() + options.timeout_s
    while True:
        snap = await watcher.snapshot()
        view.update(snap)
        if finished(snap, options.tasks, attacked):
            return snap, True
        if time.monotonic() > deadline:
            view.log(f"[red]time is up[/] after {options.timeout_s:.0f}s: not every task is done")
            return snap, False
        await asyncio.sleep(POLL_S)


def task_rows(snap: Snapshot, tasks: tuple[str, ...]) -> list[dict[str, Any]]:
    """Per task: author, PR, reviewers, the jobs' verdicts in order, the merge commit."""
    rows = []
    for task in tasks:
        pr = snap.pr_for(task) or {}
        reviews = pr.get("reviews") or []
        jobs = snap.jobs_for(task)
        rows.append(
            {
                "task": task,
                "state": (snap.tasks.get(task) or {}).get("state"),
                "author": pr.get("author"),
                "pr": pr.get("number"),
                "pr_state": pr.get("state"),
                "reviewers": sorted({r["user"] for r in reviews}),
                "reviews": [
                    {"user": r["user"], "state": r["state"], "commit": r["commit_id"]} for r in reviews
                ],
                "jobs": [
                    {
                        "id": j["id"],
                        "sha": j.get("sha"),
                        "state": j.get("state"),
                        "verdict": j.get("verdict"),
                        "flags": (j.get("result") or {}).get("flags", []),
                    }
                    for j in jobs
                ],
                "head": pr.get("head_sha"),
                "merge": pr.get("merge_sha"),
            }
        )
    return rows


def build_dataset_now(running: Running) -> dict[str, Any]:
    """``kswarm dataset build --repo kswarm/dataset``'s code, run in a thread (the gateway is in ours)."""
    from gateway.dataset.build import build_dataset
    from orchestrator.spec import agent_models

    out = running.home / "dataset"
    report = build_dataset(
        running.url, running.operator_token, DATASET_REPO, out, models=agent_models(running.home)
    )
    return {"paths": {k: str(v) for k, v in vars(report.paths).items()}, "summary": report.summary}


async def drive(running: Running, options: DemoOptions, view: ProgressView) -> dict[str, Any]:
    """The whole demo flow; returns the summary (also written to ``<home>/demo/summary.json``)."""
    api = operator_client(running)
    started = time.monotonic()
    try:
        await set_stage(api)
        view.log(f"seeded {DATASET_REPO} (main protected: 1 approval + {CHECK}) and the knowledge base")
        await wait_for_agents(api, running.roster.everyone, view, timeout_s=180)
        text = kickoff_text(running, options.tasks)
        await api.request("POST", f"/api/dms/{running.roster.lead}/messages", json={"text": text})
        view.log(f"[bold]operator[/] → {running.roster.lead}: {text}")
        attacked = frozenset(catalogue.unstable_solution_names()) if running.roster.red_team else frozenset()
        snap, ok = await watch(api, options, view, attacked)
    finally:
        await api.aclose()
    view.log("building the dataset (kswarm dataset build) ...")
    dataset = await asyncio.to_thread(build_dataset_now, running)
    summary = {
        "ok": ok,
        "elapsed_s": round(time.monotonic() - started, 1),
        "url": running.url,
        "ui": f"{running.url}/ui",
        "home": str(running.home),
        "repo": DATASET_REPO,
        "roster": {
            "lead": running.roster.lead,
            "developers": list(running.roster.developers),
            "reviewers": list(running.roster.reviewers),
        },
        "tasks": task_rows(snap, options.tasks),
        "jobs": {k: v for k, v in snap.counts()["jobs"].items()},
        "dataset": dataset,
    }
    path = running.home / "demo" / "summary.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(summary, indent=1))
    tmp.replace(path)
    return summary
