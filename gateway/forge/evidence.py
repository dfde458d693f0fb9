"""The gate's evidence: which job verified which kernel, as which task, at which sha, with what verdict.

The job runner records one ``Verification`` per job (queued at submission, final when the gateway
records the worker's result) through ``ledger.EvidenceLedger``; nobody else writes there, and no
request field reaches it. The gate
reads a sha's records to decide, per changed kernel and required pool, whether the PR is covered
(``gateway/forge/policy.py``), and publishes the per-kernel and aggregate commit statuses from them.

A verdict counts only for the exact (sha, kernel path, task, pool, kind) it was produced on; the task
is always the one the kernel's path names (``gateway/forge/kernels.py``). ``outcome`` says what a job
proves: ``pass``; ``fail`` (the harness judged the kernel: fail or unverifiable — a property of the
kernel, whoever submitted the job); ``pending``; or ``none`` (error, timeout, cancellation: the job
proved nothing about the kernel, so another agent's short-timeout or cancelled job cannot flip a PR).
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel, Field

Outcome = Literal["pass", "fail", "pending", "none"]
PENDING_STATES = frozenset({"queued", "running"})


def check_context(kind: str, pool: str) -> str:
    """The aggregate (required) status context of a job kind on a pool: ``kswarm/verify:cpu``."""
    return f"kswarm/{kind}:{pool}"


def kernel_context(kind: str, pool: str, kernel: str) -> str:
    """The per-kernel status context: ``kswarm/verify:cpu/<task>/<file>`` for ``kernels/<task>/<file>``."""
    return f"{check_context(kind, pool)}/{kernel.removeprefix('kernels/')}"


def parse_check_context(context: str) -> tuple[str, str] | None:
    """(kind, pool) of an aggregate kswarm context, else None (an external status context)."""
    if not context.startswith("kswarm/") or "/" in context.removeprefix("kswarm/"):
        return None
    kind, sep, pool = context.removeprefix("kswarm/").partition(":")
    if not sep or kind not in ("verify", "bench") or not pool:
        return None
    return kind, pool


class Verification(BaseModel):
    """One job on one kernel at one sha."""

    job_id: str
    repo: str = Field(description="org/name.")
    sha: str
    kernel: str = Field(description="kernels/<task>/<file>.py")
    task: str = Field(description="The task its path names (the only task it can be verified as).")
    pool: str
    kind: str = Field(description="verify or bench.")
    submitter: str = Field(description="From the submitting token.")
    state: str = Field(description="The job's state: queued, running or a final state.")
    verdict: str | None = Field(None, description="The harness verdict, once final.")
    error: str | None = None
    reproduce_pr: int | None = None
    ts: float = Field(default_factory=time.time)

    @property
    def context(self) -> str:
        return check_context(self.kind, self.pool)

    @property
    def outcome(self) -> Outcome:
        if self.state in PENDING_STATES:
            return "pending"
        if self.state == "succeeded" and self.verdict == "pass":
            return "pass"
        if self.state == "failed" and self.verdict in ("fail", "unverifiable"):
            return "fail"
        return "none"

    def brief(self) -> str:
        what = self.verdict or self.state
        return f"job {self.job_id} by @{self.submitter}: {what}"


def combine(records: list[Verification]) -> Outcome:
    """One kernel's standing on one context: any real failure fails it; else any pass passes it."""
    outcomes = {r.outcome for r in records}
    for outcome in ("fail", "pass", "pending"):
        if outcome in outcomes:
            return outcome  # type: ignore[return-value]
    return "none"
