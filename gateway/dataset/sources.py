"""Where the dataset's facts come from: job records (the job runner), PRs and reviews (the forge's
Gitea-shaped REST, so Gitea works too) and the repo's history (a git mirror over smart HTTP)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from gateway.client import GatewayClient

TERMINAL = ("succeeded", "failed", "error", "timeout")
JOBS_PAGE = 500  # the most /api/jobs returns at once


class JobRecord(BaseModel):
    """The fields of a job runner's ``Job`` the dataset uses (gateway/jobs/models.py)."""

    model_config = ConfigDict(extra="ignore")

    id: str = Field(description="Job id.")
    submitter: str = Field(description="Who submitted it.")
    repo: str = Field(description="org/name.")
    sha: str = Field(description="Commit verified.")
    task: str = Field(description="Task id.")
    kernel: str = Field(description="Candidate path in the repo.")
    pool: str = Field(description="Pool.")
    kind: str = Field("verify", description="verify or bench.")
    state: str = Field(description="Final state.")
    verdict: str | None = Field(None, description="Harness verdict.")
    error: str | None = Field(None, description="Why it did not pass.")
    node: str | None = Field(None, description="Node that ran it.")
    allocated: list[str] = Field(default_factory=list, description="Device ids held.")
    submitted: float = Field(0.0, description="Submission time.")
    started: float | None = Field(None, description="Start of the last attempt.")
    finished: float | None = Field(None, description="Finish time.")
    reproduce_pr: int | None = Field(None, description="PR reproduced, if any.")
    result: dict[str, Any] | None = Field(None, description="The harness's VerificationResult as JSON.")


class JobRecordSource(Protocol):
    """Anything that lists finished verification jobs of a repo."""

    def job_records(self, repo: str) -> list[JobRecord]: ...


class GatewayJobSource:
    """Job records from the gateway's ``GET /api/jobs?full=true`` (the newest ``JOBS_PAGE`` jobs)."""

    def __init__(self, gateway: GatewayClient) -> None:
        self.gateway = gateway

    def job_records(self, repo: str) -> list[JobRecord]:
        listed = self.gateway.get("/api/jobs", full="true", limit=JOBS_PAGE)
        jobs = [JobRecord.model_validate(j) for j in listed]
        return [j for j in jobs if j.repo == repo and j.state in TERMINAL]


class FileJobSource:
    """Job records from a JSON Lines export (one ``Job`` per line), e.g. for an offline rebuild."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def job_records(self, repo: str) -> list[JobRecord]:
        lines = [ln for ln in self.path.read_text().splitlines() if ln.strip()]
        jobs = [JobRecord.model_validate_json(ln) for ln in lines]
        return [j for j in jobs if j.repo == repo and j.state in TERMINAL]


class ReviewInfo(BaseModel):
    user: str
    state: str
    commit_id: str = ""
    dismissed: bool = False


class PullInfo(BaseModel):
    number: int
    title: str
    author: str
    state: str  # open | closed
    merged: bool
    head_ref: str
    head_sha: str | None
    base_ref: str
    base_sha: str | None
    merge_base: str | None
    merge_commit: str | None
    reviews: list[ReviewInfo] = Field(default_factory=list)


class ForgeReviewSource:
    """PRs with their reviews and the repo's clone URL, over the Gitea-shaped ``/api/v1``."""

    def __init__(self, gateway: GatewayClient) -> None:
        self.gateway = gateway

    def repo(self, repo: str) -> dict[str, Any]:
        return self.gateway.get(f"/api/v1/repos/{repo}")

    def pulls(self, repo: str) -> list[PullInfo]:
        out = []
        for pr in self.gateway.get(f"/api/v1/repos/{repo}/pulls", state="all"):
            reviews = self.gateway.get(f"/api/v1/repos/{repo}/pulls/{pr['number']}/reviews")
            head, base = pr.get("head") or {}, pr.get("base") or {}
            out.append(
                PullInfo(
                    number=pr["number"],
                    title=pr.get("title", ""),
                    author=(pr.get("user") or {}).get("login", ""),
                    state=pr.get("state", "open"),
                    merged=bool(pr.get("merged")),
                    head_ref=head.get("ref", ""),
                    head_sha=head.get("sha"),
                    base_ref=base.get("ref", ""),
                    base_sha=base.get("sha"),
                    merge_base=pr.get("merge_base"),
                    merge_commit=pr.get("merge_commit_sha"),
                    reviews=[
                        ReviewInfo(
                            user=(r.get("user") or {}).get("login", ""),
                            state=r.get("state", ""),
                            commit_id=r.get("commit_id") or "",
                            dismissed=bool(r.get("dismissed")),
                        )
                        for r in reviews
                    ],
                )
            )
        return out


def _git_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(HOME=str(home), GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    return env


class GitMirror:
    """A bare mirror of the repo (every branch, agents' included), fetched with a token."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def fetch(cls, clone_url: str, token: str, path: Path) -> GitMirror:
        # The token goes through the environment (readable by this user only), never the argv (ps).
        helper = "!f() { echo username=kswarm; echo password=$KSWARM_GIT_TOKEN; }; f"
        env = _git_env(path.parent)
        env.update(
            KSWARM_GIT_TOKEN=token,
            GIT_CONFIG_COUNT="2",
            GIT_CONFIG_KEY_0="credential.helper",
            GIT_CONFIG_VALUE_0="",
            GIT_CONFIG_KEY_1="credential.helper",
            GIT_CONFIG_VALUE_1=helper,
        )
        if (path / "HEAD").is_file():
            argv = ["git", f"--git-dir={path}", "fetch", "-q", "--prune", "origin", "+refs/*:refs/*"]
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            argv = ["git", "clone", "-q", "--mirror", clone_url, str(path)]
        subprocess.run(argv, env=env, check=True, capture_output=True, text=True, timeout=300)
        return cls(path)

    def git(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            ["git", f"--git-dir={self.path}", *args],
            env=_git_env(self.path.parent),
            capture_output=True,
            check=check,
            timeout=120,
        )

    def has(self, sha: str) -> bool:
        return self.git("cat-file", "-e", f"{sha}^{{commit}}", check=False).returncode == 0

    def author_email(self, sha: str) -> str | None:
        done = self.git("log", "-1", "--format=%ae", sha, check=False)
        if done.returncode != 0:
            return None
        return done.stdout.decode().strip() or None

    def file_at(self, sha: str, path: str) -> bytes | None:
        done = self.git("show", f"{sha}:{path}", check=False)
        return done.stdout if done.returncode == 0 else None

    def commits_between(self, base: str | None, head: str | None) -> list[str]:
        """Commits reachable from ``head`` but not from ``base`` (a PR's own commits)."""
        if not head or not self.has(head):
            return []
        args = ["rev-list", head] + ([f"^{base}"] if base and self.has(base) else [])
        done = self.git(*args, check=False)
        return done.stdout.decode().split() if done.returncode == 0 else []
