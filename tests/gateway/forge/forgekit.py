"""Test support for the forge: a gateway with the forge plugin, and a real git CLI client."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis as redis_sync
from redis.asyncio import Redis

from gateway.forge.gate.evidence import Verification, derive_evidence
from gateway.forge.gate.ledger import EvidenceLedger
from gateway.forge.plugin import ForgePlugin
from gateway.forge.settings import ForgeSettings
from gateway.plugin import Plugin
from gateway.plugins import default_plugins, replace_plugins
from kstest.gateway import GatewayThread
from kstest.waiting import wait_for


def with_forge(settings: ForgeSettings | None = None) -> list[Plugin[Any]]:
    """The default plugins, the forge with ``settings``."""
    return replace_plugins(default_plugins(), ForgePlugin(settings))


class ForgeGateway(GatewayThread):
    """``GatewayThread`` (real uvicorn in a thread of the test process) with the forge plugin."""

    tokens: dict[str, str]
    forge_settings: ForgeSettings | None = None

    def plugins(self) -> list[Any]:
        return with_forge(self.forge_settings)

    def op(self) -> httpx.Client:
        return self.client(self.operator_token)

    def gitea(self, token: str) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.url}/api/v1", headers={"Authorization": f"token {token}"}, timeout=30
        )


AGENTS = ("alice", "bob", "carol")


@contextmanager
def running_gateway(redis_url: str, settings: ForgeSettings | None = None) -> Iterator[ForgeGateway]:
    client = redis_sync.Redis.from_url(redis_url)
    client.flushall()
    client.close()
    tmp = Path(tempfile.mkdtemp(prefix="ksf"))
    gw = ForgeGateway(tmp / "home", redis_url)
    gw.forge_settings = settings
    gw.start()
    gw.tokens = {n: gw.add_principal(n) for n in AGENTS}
    gw.tokens["worker1"] = gw.add_principal("worker1", "worker")
    try:
        yield gw
    finally:
        gw.stop()
        shutil.rmtree(tmp, ignore_errors=True)


class Git:
    """The real git CLI as one principal: credentials from a helper, identity from ``user.*``."""

    def __init__(self, home: Path, token: str, name: str, email: str) -> None:
        self.home = home
        self.token = token
        self.name = name
        self.email = email
        home.mkdir(parents=True, exist_ok=True)

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(HOME=str(self.home), GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
        env.update(extra or {})
        return env

    def run(
        self, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        helper = f"!f() {{ echo username=x; echo password={self.token}; }}; f"
        argv = [
            "git",
            "-c",
            "credential.helper=",
            "-c",
            f"credential.helper={helper}",
            "-c",
            f"user.name={self.name}",
            "-c",
            f"user.email={self.email}",
            "-c",
            "init.defaultBranch=main",
            *args,
        ]
        result = subprocess.run(argv, cwd=cwd, env=self.env(env), capture_output=True, text=True, timeout=60)
        if check and result.returncode != 0:
            raise AssertionError(f"git {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result

    def clone(self, url: str, dest: Path) -> Path:
        self.run("clone", "-q", url, str(dest))
        return dest

    def commit(self, repo: Path, path: str, content: str, message: str, *extra: str, **env: str) -> str:
        file = repo / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(content)
        self.run("add", path, cwd=repo)
        self.run("commit", "-q", "-m", message, *extra, cwd=repo, env=env or None)
        return self.head(repo)

    def head(self, repo: Path, ref: str = "HEAD") -> str:
        return self.run("rev-parse", ref, cwd=repo).stdout.strip()

    def push(self, repo: Path, *refspec: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        return self.run("push", "origin", *refspec, cwd=repo, check=check)


@dataclass
class Swarm:
    gw: ForgeGateway
    tmp: Path
    org: str
    repo: str
    tokens: dict[str, str]

    @property
    def full(self) -> str:
        return f"{self.org}/{self.repo}"

    @property
    def repo_url(self) -> str:
        return f"{self.gw.url}/git/{self.org}/{self.repo}.git"

    def git(self, name: str) -> Git:
        kind = "workers" if name.startswith("worker") else "agents"
        return Git(self.tmp / f"h-{name}", self.tokens[name], name, f"{name}@{kind}.{self.gw.swarm}")

    def clone(self, name: str, dest: str | None = None) -> tuple[Git, Path]:
        git = self.git(name)
        return git, git.clone(self.repo_url, self.tmp / (dest or f"w-{name}"))

    def push_branch(self, who: str, branch: str, path: str, content: str) -> tuple[Git, Path, str]:
        """Clone, commit ``path`` on a new ``branch`` from main and push it; (git, work dir, sha)."""
        git, repo = self.clone(who, f"w-{branch.replace('/', '-')}")
        git.run("checkout", "-q", "-b", branch, cwd=repo)
        sha = git.commit(repo, path, content, f"{branch}: {path}")
        result = git.push(repo, branch)
        assert result.returncode == 0, result.stderr
        return git, repo, sha

    def api(self, who: str) -> httpx.Client:
        """The Gitea-shaped API as ``who`` (operator: the admin)."""
        return self.gw.gitea(self.gw.operator_token if who == "operator" else self.tokens[who])

    def open_pr(self, who: str, head: str, reviewers: tuple[str, ...] = ()) -> int:
        body = {"head": head, "base": "main", "title": f"PR {head}", "reviewers": list(reviewers)}
        with self.api(who) as api:
            reply = api.post(f"/repos/{self.full}/pulls", json=body)
        assert reply.status_code == 201, reply.text
        return reply.json()["number"]

    def review(self, who: str, number: int, event: str, body: str = "") -> httpx.Response:
        with self.api(who) as api:
            return api.post(f"/repos/{self.full}/pulls/{number}/reviews", json={"event": event, "body": body})

    def status(self, who: str, sha: str, state: str, context: str = "kswarm/verify:cpu") -> httpx.Response:
        with self.api(who) as api:
            return api.post(f"/repos/{self.full}/statuses/{sha}", json={"state": state, "context": context})

    def verify(
        self,
        sha: str,
        kernel: str,
        verdict: str = "pass",
        *,
        submitter: str = "alice",
        pool: str = "cpu",
        kind: str = "verify",
        task: str | None = None,
        state: str | None = None,
        evidence: str | None = "honest",
    ) -> str:
        """Record a job's verification of ``kernel`` at ``sha`` the way the job runner does (the
        ledger the gate reads); returns the job id. ``verdict`` None with ``state`` queued: pending.
        ``evidence``: the level the job runner derived; "honest" is what an honest harness's record
        yields (a pass: cpu-screened on a cpu* pool, device-verified elsewhere); None: a record
        written before evidence levels existed."""
        job_id = f"j{secrets.token_hex(7)}"
        states = {"pass": "succeeded", "fail": "failed", "unverifiable": "failed", "error": "error"}
        final = state or states.get(str(verdict), "error")
        if evidence == "honest":
            on_device = not pool.startswith("cpu")
            level = "device-verified" if on_device else "cpu-screened"
            honest = {"evidence": level, "trials": [{"device_shape": True, "ok": True}]}
            evidence = (
                derive_evidence(final, verdict, honest, on_device)
                if final not in ("queued", "running")
                else None
            )
        record = Verification(
            job_id=job_id,
            repo=self.full,
            sha=sha,
            kernel=kernel,
            task=task or kernel.split("/")[1],
            pool=pool,
            kind=kind,
            submitter=submitter,
            state=final,
            verdict=verdict,
            evidence=evidence,
        )

        async def write() -> None:
            redis = Redis.from_url(self.gw.redis_url, decode_responses=True)
            try:
                await EvidenceLedger(redis).record(record)
            finally:
                await redis.aclose()

        asyncio.run(write())
        return job_id

    def statuses(self, sha: str) -> dict[str, tuple[str, str]]:
        """context -> (state, creator) of the latest statuses on ``sha``."""
        with self.api("operator") as api:
            combined = api.get(f"/repos/{self.full}/commits/{sha}/status").json()
        return {s["context"]: (s["status"], s["creator"]["login"]) for s in combined["statuses"]}

    def pr(self, number: int) -> dict[str, Any]:
        with self.api("operator") as api:
            reply = api.get(f"/repos/{self.full}/pulls/{number}")
        assert reply.status_code == 200, reply.text
        return reply.json()

    def view(self, number: int) -> dict[str, Any]:
        """kswarm's PR view: reviews, checks, the gate's verdict and audit."""
        with self.gw.op() as op:
            reply = op.get(f"/api/forge/repos/{self.full}/pulls/{number}")
        assert reply.status_code == 200, reply.text
        return reply.json()

    def wait_merged(self, number: int, timeout: float = 20.0) -> dict[str, Any]:
        return wait_for(lambda: (pr := self.pr(number))["merged"] and pr, timeout)

    def wait_decision(
        self, number: int, since: float, codes: set[str] | None = None, timeout: float = 20.0
    ) -> dict[str, Any]:
        """The gate's latest decision on ``number`` taken at or after ``since`` (time.time()), waiting
        until its reason codes are ``codes`` when given (events are handled asynchronously)."""

        def find() -> dict[str, Any] | None:
            entries = self.view(number).get("audit", [])
            fresh = [e for e in entries if max(e["ts"], e.get("last_ts", 0)) >= since]
            if not fresh:
                return None
            if codes is not None and {r["code"] for r in fresh[-1]["reasons"]} != codes:
                return None
            return fresh[-1]

        return wait_for(find, timeout)

    def reviews_channel(self) -> list[str]:
        with self.gw.op() as op:
            reply = op.get("/api/channels/reviews/messages", params={"limit": 500})
        return [m["text"] for m in reply.json()["messages"] if self.full in m["text"]]

    def set_policy(self, **policy: object) -> None:
        with self.gw.op() as op:
            reply = op.put(f"/api/forge/repos/{self.full}/policy", json=policy)
            assert reply.status_code == 200, reply.text
