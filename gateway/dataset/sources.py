"""Where the dataset's facts come from: job records (the job runner), PRs and reviews (the forge's
Gitea-shaped REST, so Gitea works too) and the repo's history (a git mirror over smart HTTP)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from gateway.client import GatewayClient, Missing
from gateway.llm.model_names import booked_model

TERMINAL = ("succeeded", "failed", "error", "timeout")
JOBS_PAGE = 500  # the most /api/jobs returns at once


class JobRecord(BaseModel):
    """The fields of a job runner's ``Job`` the dataset uses (gateway/client/jobs/models.py)."""

    model_config = ConfigDict(extra="ignore")

    id: str = Field(description="Job id.")
    submitter: str = Field(description="Who submitted it.")
    repo: str = Field(description="org/name.")
    sha: str = Field(description="Commit verified.")
    task: str = Field(description="Task id.")
    kernel: str = Field(description="Candidate path in the repo.")
    pool: str = Field(description="Pool.")
    kind: str = Field("verify", description="verify, bench or counterexample.")
    reverify: str | None = Field(None, description="The regression case a heal's re-verification ran for.")
    state: str = Field(description="Final state.")
    verdict: str | None = Field(None, description="Harness verdict.")
    error: str | None = Field(None, description="Why it did not pass.")
    node: str | None = Field(None, description="Node that ran it.")
    allocated: list[str] = Field(default_factory=list, description="Device ids held.")
    submitted: float = Field(0.0, description="Submission time.")
    started: float | None = Field(None, description="Start of the last attempt.")
    finished: float | None = Field(None, description="Finish time.")
    reproduce_pr: int | None = Field(None, description="PR reproduced, if any.")
    evidence: str | None = Field(
        None, description="What the result proves, as the gateway derived it (never the record's claim)."
    )
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


class CostWindow(BaseModel):
    tokens: float = 0.0
    cost_usd: float = 0.0


class CostSource(Protocol):
    """What an agent spent on a task in a window, and the totals per task, agent and model."""

    def window(self, task: str, agent: str, since: float, until: float) -> CostWindow | None: ...

    def report(self) -> dict[str, Any] | None: ...


class GatewayCostSource:
    """The monitor's cost ledger: ``GET /api/monitor/cost/window`` and ``GET /api/monitor/cost``.

    A gateway without the monitor answers 404: then there is no cost (``None``), not an error."""

    def __init__(self, gateway: GatewayClient) -> None:
        self.gateway = gateway
        self.available = True

    def window(self, task: str, agent: str, since: float, until: float) -> CostWindow | None:
        if not self.available:
            return None
        try:
            got = self.gateway.get(
                "/api/monitor/cost/window", task=task, agent=agent, since=since, until=until
            )
        except Missing:
            self.available = False
            return None
        return CostWindow(tokens=got.get("tokens", 0.0), cost_usd=got.get("cost_usd", 0.0))

    def report(self) -> dict[str, Any] | None:
        if not self.available:
            return None
        try:
            return dict(self.gateway.get("/api/monitor/cost"))
        except Missing:
            self.available = False
            return None


def booked_models(gateway: GatewayClient) -> dict[str, str]:
    """Agent -> the model the LLM proxy booked most of its tokens under (``GET /api/usage``: the models
    the upstream answered with, never what an agent reported); {} without a proxy. Names are checked
    again here: the build may read any gateway."""
    try:
        report = gateway.get("/api/usage")
    except Missing:
        return {}
    out: dict[str, str] = {}
    for name, usage in (report.get("agents") or {}).items():
        models = usage.get("models") or {}
        counts = {m: n for m, n in models.items() if isinstance(n, int)}
        if counts:
            out[str(name)] = booked_model(max(sorted(counts), key=lambda m: counts[m]))
    return out


def provenance_models(spec: Mapping[str, str], booked: Mapping[str, str]) -> dict[str, str]:
    """Each agent's model for the records and the card: what the proxy booked, else the swarm spec's
    (the operator's), every name a sane one or ``unknown``."""
    return {name: booked_model(model) for name, model in {**spec, **booked}.items()}


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
