"""Per-kernel coverage: which changed kernel is verified, on which required check, by which jobs.

Pure functions from a PR's classified changes (``kernels.PRChanges``) and its head's verification
records (``evidence.Verification``) to a ``KernelCoverage`` per changed kernel. A record covers a
kernel on a check only when its sha is the head, its kernel path is the kernel's path, its task is the
one that path names, and its (kind, pool) is the check's: a job on another file, another sha or as
another task never counts, neither for the author nor for a reviewer's reproduction.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from gateway.forge.evidence import Verification, check_context, combine, parse_check_context
from gateway.forge.kernels import Candidate

CoverageState = Literal["success", "failure", "pending", "missing"]
STATUS_OF_COVERAGE: dict[str, str] = {
    "success": "success",
    "failure": "failure",
    "pending": "pending",
    "missing": "pending",
}


class JobEvidence(BaseModel):
    id: str
    submitter: str
    state: str
    verdict: str | None = None
    error: str | None = None
    counts: bool = Field(description="Whether it decides anything (a pass, a real failure or pending).")


class KernelCheck(BaseModel):
    context: str = Field(description="The required check, e.g. kswarm/verify:cpu.")
    state: CoverageState
    jobs: list[JobEvidence] = Field(default_factory=list)
    message: str


class KernelCoverage(BaseModel):
    path: str
    task: str
    status: str = Field(description="added or modified")
    checks: list[KernelCheck] = Field(default_factory=list)

    @property
    def verified(self) -> bool:
        return all(c.state == "success" for c in self.checks)


def binds(record: Verification, sha: str, kernel: Candidate) -> bool:
    """Whether ``record`` is evidence about exactly this kernel at exactly this sha."""
    return record.sha == sha and record.kernel == kernel.path and record.task == kernel.task


def kernel_checks(required: list[str]) -> list[tuple[str, str, str]]:
    """(context, kind, pool) of the required checks that are kswarm verification checks."""
    out = []
    for context in required:
        parsed = parse_check_context(context)
        if parsed is not None:
            out.append((context, *parsed))
    return out


def coverage(
    sha: str, candidates: list[Candidate], records: list[Verification], required: list[str]
) -> list[KernelCoverage]:
    """Each changed kernel's standing on each required kswarm check at ``sha``."""
    checks = kernel_checks(required)
    out = []
    for kernel in candidates:
        mine = [r for r in records if binds(r, sha, kernel)]
        entry = KernelCoverage(path=kernel.path, task=kernel.task, status=kernel.status)
        for context, kind, pool in checks:
            jobs = [r for r in mine if r.kind == kind and r.pool == pool]
            entry.checks.append(_check(context, kernel, sha, jobs))
        out.append(entry)
    return out


def _check(context: str, kernel: Candidate, sha: str, jobs: list[Verification]) -> KernelCheck:
    evidence = [
        JobEvidence(
            id=j.job_id,
            submitter=j.submitter,
            state=j.state,
            verdict=j.verdict,
            error=j.error,
            counts=j.outcome != "none",
        )
        for j in jobs
    ]
    outcome = combine(jobs)
    where = f"{kernel.path} on {context} at {sha[:10]}"
    if outcome == "fail":
        bad = next(j for j in jobs if j.outcome == "fail")
        why = f": {bad.error}" if bad.error else ""
        return KernelCheck(
            context=context,
            state="failure",
            jobs=evidence,
            message=f"{where} failed ({bad.brief()}{why})"[:600],
        )
    if outcome == "pass":
        good = next(j for j in jobs if j.outcome == "pass")
        return KernelCheck(
            context=context, state="success", jobs=evidence, message=f"{where}: {good.brief()}"
        )
    if outcome == "pending":
        running = ", ".join(j.job_id for j in jobs if j.outcome == "pending")
        return KernelCheck(
            context=context, state="pending", jobs=evidence, message=f"{where} is being verified ({running})"
        )
    tried = "; ".join(j.brief() for j in jobs)
    hint = f" ({tried}, which prove nothing)" if tried else ""
    submit = f'job_submit(kernel="{kernel.path}", ref="{sha[:12]}")'
    return KernelCheck(
        context=context,
        state="missing",
        jobs=evidence,
        message=f"{where} has no passing job{hint}: {submit}"[:600],
    )


def reproduced_by(
    reviewer: str, sha: str, candidates: list[Candidate], records: list[Verification], required: list[str]
) -> list[str]:
    """The changed kernels ``reviewer`` has NOT verified with a passing job of their own at ``sha`` (on
    a required kswarm check's pool and kind when there are any, else on any pool)."""
    contexts = {c for c, _, _ in kernel_checks(required)}
    missing = []
    for kernel in candidates:
        ok = any(
            binds(r, sha, kernel)
            and r.submitter == reviewer
            and r.outcome == "pass"
            and (not contexts or check_context(r.kind, r.pool) in contexts)
            for r in records
        )
        if not ok:
            missing.append(kernel.path)
    return missing
