"""Per-kernel coverage: which changed kernel is verified, on which required check, by which jobs.

Pure functions from a PR's classified changes (``kernels.PRChanges``) and its head's verification
records (``evidence.Verification``) to a ``KernelCoverage`` per changed kernel. A record covers a
kernel on a check only when its sha is the head, its kernel path is the kernel's path, its task is the
one that path names, and its (kind, pool) is the check's: a job on another file, another sha or as
another task never counts, neither for the author nor for a reviewer's reproduction.

Each check also says what its passes prove (``evidence``: the strongest level among them) and each kernel
the strongest level over its checks. With a policy minimum (``ReviewPolicy.min_evidence``), a kernel
whose every check passed but whose level is below it is ``insufficient`` on every check (a failure:
waiting does not change a finished pass); while a check is still pending or missing, the missing pass
may yet bring the level (a device pool's job), so nothing is insufficient yet.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from gateway.forge.gate.evidence import (
    EVIDENCE_LEVELS,
    EVIDENCE_MEANS,
    EvidenceLevel,
    Verification,
    check_context,
    combine,
    evidence_rank,
    parse_check_context,
)
from gateway.forge.gate.kernels import Candidate

CoverageState = Literal["success", "failure", "pending", "missing", "insufficient"]
STATUS_OF_COVERAGE: dict[str, str] = {
    "success": "success",
    "failure": "failure",
    "pending": "pending",
    "missing": "pending",
    "insufficient": "failure",
}


class JobEvidence(BaseModel):
    id: str
    submitter: str
    state: str
    verdict: str | None = None
    error: str | None = None
    evidence: EvidenceLevel | None = Field(None, description="What the job proves, once final.")
    counts: bool = Field(description="Whether it decides anything (a pass, a real failure or pending).")


class KernelCheck(BaseModel):
    context: str = Field(description="The required check, e.g. kswarm/verify:cpu.")
    state: CoverageState
    jobs: list[JobEvidence] = Field(default_factory=list)
    message: str
    evidence: EvidenceLevel = Field(
        "none", description="The strongest level of its passing jobs (none without a pass)."
    )
    summary: str = Field(
        "", description="The short form its commit status carries, e.g. pass (cpu-screened): job j1 by @a."
    )


class KernelCoverage(BaseModel):
    path: str
    task: str
    status: str = Field(description="added or modified")
    checks: list[KernelCheck] = Field(default_factory=list)
    evidence: EvidenceLevel = Field(
        "none", description="The strongest level any of its required checks' passes proves."
    )
    required_evidence: EvidenceLevel | None = Field(
        None, description="The policy's minimum (min_evidence) when it has kswarm checks, else None."
    )

    @property
    def evidence_ok(self) -> bool:
        return self.required_evidence is None or evidence_rank(self.evidence) >= evidence_rank(
            self.required_evidence
        )

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
    sha: str,
    candidates: list[Candidate],
    records: list[Verification],
    required: list[str],
    min_evidence: EvidenceLevel | None = None,
) -> list[KernelCoverage]:
    """Each changed kernel's standing on each required kswarm check at ``sha``, and whether its passes
    prove at least ``min_evidence``."""
    checks = kernel_checks(required)
    out = []
    for kernel in candidates:
        mine = [r for r in records if binds(r, sha, kernel)]
        entry = KernelCoverage(
            path=kernel.path,
            task=kernel.task,
            status=kernel.status,
            required_evidence=min_evidence if checks else None,
        )
        for context, kind, pool in checks:
            jobs = [r for r in mine if r.kind == kind and r.pool == pool]
            entry.checks.append(_check(context, kernel, sha, jobs))
        entry.evidence = EVIDENCE_LEVELS[max((evidence_rank(c.evidence) for c in entry.checks), default=0)]
        if entry.checks and all(c.state == "success" for c in entry.checks) and not entry.evidence_ok:
            for check in entry.checks:
                _insufficient(check, entry)
        out.append(entry)
    return out


def _insufficient(check: KernelCheck, kernel: KernelCoverage) -> None:
    """Every required pass is in and the kernel's strongest level is below the policy's minimum."""
    need = kernel.required_evidence or "none"
    check.state = "insufficient"
    check.message = (
        f"{check.message}; the kernel's evidence is {kernel.evidence} "
        f"({EVIDENCE_MEANS[kernel.evidence]}), the policy requires {need}"
    )[:600]
    check.summary = f"pass ({check.evidence}); {need} required"


def _check(context: str, kernel: Candidate, sha: str, jobs: list[Verification]) -> KernelCheck:
    evidence = [
        JobEvidence(
            id=j.job_id,
            submitter=j.submitter,
            state=j.state,
            verdict=j.verdict,
            error=j.error,
            evidence=None if j.outcome == "pending" else j.level,
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
            summary=f"{bad.verdict or bad.state}: job {bad.job_id} by @{bad.submitter}",
        )
    if outcome == "pass":
        # The strongest pass speaks for the check (a later device-shape run can only add proof).
        good = max((j for j in jobs if j.outcome == "pass"), key=lambda j: evidence_rank(j.level))
        return KernelCheck(
            context=context,
            state="success",
            jobs=evidence,
            message=f"{where}: {good.brief()}",
            evidence=good.level,
            summary=f"pass ({good.level}): job {good.job_id} by @{good.submitter}",
        )
    if outcome == "pending":
        running = ", ".join(j.job_id for j in jobs if j.outcome == "pending")
        return KernelCheck(
            context=context,
            state="pending",
            jobs=evidence,
            message=f"{where} is being verified ({running})",
            summary=f"being verified ({running})",
        )
    tried = "; ".join(j.brief() for j in jobs)
    hint = f" ({tried}, which prove nothing)" if tried else ""
    _, pool = parse_check_context(context) or ("verify", "cpu")
    on_pool = "" if pool == "cpu" else f', pool="{pool}"'  # cpu is job_submit's default pool
    submit = f'job_submit(kernel="{kernel.path}", ref="{sha[:12]}"{on_pool})'
    return KernelCheck(
        context=context,
        state="missing",
        jobs=evidence,
        message=f"{where} has no passing job{hint}: {submit}"[:600],
        summary=f"no passing job: {submit}",
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
