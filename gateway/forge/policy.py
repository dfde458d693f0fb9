"""The review policy and its evaluation: a pure function from a PR's facts to a decision with reasons.

Both the embedded forge (refusing a merge while protection is unmet, as Gitea does) and the gate bot
(deciding to merge) call ``evaluate``; only the gate passes the PR's classified changes and its head's
verification records, so only the gate decides kswarm checks per changed kernel.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, Field

from gateway.forge.coverage import KernelCoverage, kernel_checks, reproduced_by
from gateway.forge.coverage import coverage as kernel_coverage
from gateway.forge.evidence import (
    EVIDENCE_LEVELS,
    EVIDENCE_MEANS,
    Verification,
    evidence_rank,
    parse_check_context,
)
from gateway.forge.kernels import DEFAULT_TRUSTED_PATHS, BlockedPath, PRChanges
from gateway.forge.models import PullRequest, Review

# The levels a policy may require: those a pass can reach. "none" and "unverifiable-on-cpu" never prove a
# kernel right, so a policy asking for them would require nothing; they are refused (422), not ignored.
MinEvidence = Literal["cpu-shapes-only", "cpu-screened", "device-verified"]
# A cpu-shapes-only pass ran the interpreter on the small CPU shapes only: too little to merge on.
DEFAULT_MIN_EVIDENCE: MinEvidence = "cpu-screened"


class ReviewPolicy(BaseModel):
    """What a protected branch requires before the gate merges into it."""

    required_approvals: int = Field(
        1,
        ge=0,
        description="Approvals on the head sha by reviewers other than the author; operators' approvals "
        "count toward human_approvals instead (when the gate knows who the operators are).",
    )
    human_approvals: int = Field(
        0,
        ge=0,
        description="Approvals on the head sha by operator principals (humans), counted apart from the "
        "agents' approvals.",
    )
    required_checks: list[str] = Field(
        default_factory=list,
        description="Status contexts that must be success on the head sha. kswarm/<kind>:<pool> (e.g. "
        "kswarm/verify:cpu) means: every kernel the PR changes passed a <kind> job on <pool> at the head.",
    )
    min_evidence: MinEvidence = Field(
        DEFAULT_MIN_EVIDENCE,
        description="The least a changed kernel's passes on the required kswarm checks must prove (issue 22 "
        "principle 6): cpu-shapes-only (any pass), cpu-screened (the cpu interpreter also sampled the "
        "task's device shapes; the default), device-verified (a device pool passed it: list that pool's "
        "check in required_checks, e.g. kswarm/verify:npu-910c). unverifiable-on-cpu and none prove no "
        "kernel right and are refused here. Applies only with a kswarm/<kind>:<pool> required check.",
    )
    require_reproduction: bool = Field(
        False,
        description="An approval counts only if its reviewer verified every changed kernel at the head "
        "with a passing job of their own.",
    )
    protected_branches: list[str] = Field(
        default_factory=lambda: ["main"], description="Branches only the gate merges into."
    )
    dataset: bool = Field(
        False,
        description="A kernel dataset branch: trusted paths are operator-only, agents add or change only "
        "their own kernels (kernels/<task>/<author>_<variant>.py), kernels are never deleted by a PR.",
    )
    trusted_paths: list[str] = Field(
        default_factory=lambda: list(DEFAULT_TRUSTED_PATHS),
        description="Operator-only paths of a dataset branch (fnmatch patterns, * crosses /).",
    )


class Reason(BaseModel):
    code: str = Field(description="Machine-readable reason, e.g. changes-requested, check-missing.")
    message: str
    blocking: bool = Field(
        False, description="True for hard blocks (change request, failed check, conflict); False: waiting."
    )


class GateDecision(BaseModel):
    repo: str
    number: int
    head_sha: str | None
    mergeable: bool
    reasons: list[Reason] = Field(default_factory=list)
    approvals: list[str] = Field(default_factory=list, description="Reviewers whose approval counts.")
    human_approvals: list[str] = Field(
        default_factory=list, description="Operators whose approval on the head counts as a human one."
    )
    notes: list[str] = Field(default_factory=list, description="Things ignored, and why.")
    kernels: list[KernelCoverage] = Field(
        default_factory=list, description="Per changed kernel: its verification on each required check."
    )
    blocked_paths: list[BlockedPath] = Field(
        default_factory=list, description="Changed paths only operators may change (dataset branches)."
    )
    ts: float = Field(default_factory=time.time)

    def summary(self) -> str:
        if self.mergeable:
            return "mergeable: every rule holds"
        return "; ".join(r.message for r in self.reasons)

    def aggregate(self, context: str) -> tuple[str, str]:
        """(state, description) of a kswarm check for this PR, computed from its kernels' coverage; the
        description names the level its passes prove (the weakest kernel's), e.g. pass (cpu-screened)."""
        checks = [c for k in self.kernels for c in k.checks if c.context == context]
        states = [c.state for c in checks]
        if not states:
            return "success", "no kernels changed: nothing to verify"
        done = sum(s == "success" for s in states)
        if "failure" in states:
            return "failure", f"{states.count('failure')} of {len(states)} changed kernel(s) failed"
        weakest = EVIDENCE_LEVELS[min(evidence_rank(c.evidence) for c in checks)]
        if "insufficient" in states:
            need = next(k.required_evidence for k in self.kernels if not k.evidence_ok)
            return "failure", (
                f"insufficient evidence ({weakest}; {need} required): "
                f"{states.count('insufficient')} of {len(states)} changed kernel(s)"
            )
        if done == len(states):
            return "success", f"pass ({weakest}): all {len(states)} changed kernel(s) verified"
        return "pending", f"{done} of {len(states)} changed kernel(s) verified"


def short(sha: str | None) -> str:
    return (sha or "?")[:10]


def latest_verdicts(pr: PullRequest) -> dict[str, Review]:
    """Each non-author reviewer's latest APPROVED / REQUEST_CHANGES review that was not dismissed."""
    verdicts: dict[str, Review] = {}
    for review in sorted(pr.reviews, key=lambda r: (r.submitted, r.id)):
        if review.user == pr.author or review.state not in ("APPROVED", "REQUEST_CHANGES"):
            continue
        if review.dismissed and review.state == "APPROVED":
            verdicts.pop(review.user, None)  # a dismissed approval leaves no verdict behind
            continue
        if not review.dismissed:
            verdicts[review.user] = review
    return verdicts


def evaluate(
    pr: PullRequest,
    policy: ReviewPolicy,
    *,
    changes: PRChanges | None = None,
    evidence: list[Verification] | None = None,
    status_setters: set[str] | None = None,
    operators: set[str] | None = None,
) -> GateDecision:
    """Why ``pr`` may or may not be merged now.

    With ``changes`` and ``evidence`` (the gate), every kswarm check (``kswarm/<kind>:<pool>``) is
    decided per changed kernel from the verification records, dataset rules apply, and reproduction is
    checked per kernel; without them (the embedded forge refusing a merge as Gitea would) required
    checks are plain commit statuses. ``status_setters``, when given, are the principals whose statuses
    count; statuses by anyone else are ignored with a note. ``operators``, when given, are the
    operator principals: their approvals count toward ``human_approvals`` and not toward
    ``required_approvals`` (without it every approval counts toward the latter, as in Gitea).
    """
    head = pr.head_sha
    decision = GateDecision(repo=pr.full_name, number=pr.number, head_sha=head, mergeable=False)
    reasons = decision.reasons

    def add(code: str, message: str, blocking: bool = False) -> None:
        reasons.append(Reason(code=code, message=message, blocking=blocking))

    if pr.merged:
        add("merged", f"already merged as {short(pr.merge_sha)}", blocking=True)
        return decision
    if pr.state != "open":
        add("closed", "the PR is closed", blocking=True)
        return decision
    if head is None:
        add("no-head", f"head branch {pr.head!r} does not exist", blocking=True)
        return decision
    if pr.base_sha is None:
        add("no-base", f"base branch {pr.base!r} does not exist", blocking=True)
        return decision
    if pr.mergeable is False:
        add("conflict", f"{pr.head} conflicts with {pr.base}: rebase or merge {pr.base} and push", True)

    by_kernel = changes is not None and evidence is not None
    candidates = changes.candidates if changes is not None else []
    if changes is not None:
        decision.blocked_paths = list(changes.blocked)
        for blocked in changes.blocked:
            add("trusted-path", blocked.why, blocking=True)
        for stale in changes.stale:
            add("kernel-stale", stale.why, blocking=True)

    verdicts = latest_verdicts(pr)
    for user, review in sorted(verdicts.items()):
        if review.state == "REQUEST_CHANGES":
            add(
                "changes-requested",
                f"@{user} requested changes (on {short(review.commit_id)}); it blocks until @{user} "
                "approves a later head",
                blocking=True,
            )

    if any(r.user == pr.author and r.state == "APPROVED" for r in pr.reviews):
        decision.notes.append(f"approval by the author @{pr.author} ignored")
    approvals: list[str] = []
    humans: list[str] = []
    for user, review in sorted(verdicts.items()):
        if review.state != "APPROVED":
            continue
        if review.commit_id != head:
            decision.notes.append(
                f"approval by @{user} was on {short(review.commit_id)}, not the head {short(head)}"
            )
            continue
        if operators is not None and user in operators:
            humans.append(user)  # a human's approval: counted apart, never as an agent's review
            continue
        if policy.require_reproduction:
            missing = (
                reproduced_by(user, head, candidates, evidence or [], policy.required_checks)
                if by_kernel
                else ["(no verification records)"]
            )
            if missing:
                decision.notes.append(f"approval by @{user} not counted: no passing reproduction")
                add(
                    "reproduction",
                    f"@{user} approved but has not verified {', '.join(missing)} at {short(head)} "
                    "with a passing job of their own",
                )
                continue
        approvals.append(user)
    decision.approvals = approvals
    decision.human_approvals = humans
    if len(approvals) < policy.required_approvals:
        stale = [n for n in decision.notes if "not the head" in n]
        extra = f" ({'; '.join(stale)})" if stale else ""
        who = "agents" if operators is not None else "reviewers"
        add(
            "approvals",
            f"{len(approvals)} of {policy.required_approvals} approval(s) on head {short(head)} "
            f"from {who} other than @{pr.author}{extra}",
        )
    if policy.human_approvals and len(humans) < policy.human_approvals:
        have = f" (so far: {', '.join('@' + h for h in humans)})" if humans else ""
        add(
            "human-approvals",
            f"{len(humans)} of {policy.human_approvals} human approval(s) on head {short(head)}: an "
            f"operator approves with `kswarm pr review {pr.number} --approve` or in the UI{have}",
        )

    if by_kernel:
        decision.kernels = kernel_coverage(
            head, candidates, evidence or [], policy.required_checks, policy.min_evidence
        )
        if kernel_checks(policy.required_checks) and not candidates:
            decision.notes.append("no kernels changed: no verification needed")
        for kernel in decision.kernels:
            if any(c.state == "insufficient" for c in kernel.checks):
                add("kernel-evidence", evidence_reason(kernel, head, policy), blocking=True)
            for check in kernel.checks:
                if check.state == "failure":
                    add("kernel-failed", check.message, blocking=True)
                elif check.state == "pending":
                    add("kernel-pending", check.message)
                elif check.state == "missing":
                    add("kernel-unverified", check.message)
    plain = [c for c in policy.required_checks if not (by_kernel and parse_check_context(c))]
    _plain_checks(pr, head, plain, status_setters, decision, add)

    decision.mergeable = not reasons
    return decision


def evidence_reason(kernel: KernelCoverage, head: str, policy: ReviewPolicy) -> str:
    """Why a kernel whose required checks all passed is still not enough, and what would be."""
    have, need = kernel.evidence, policy.min_evidence
    passes = ", ".join(f"{c.context}: {c.summary.partition(';')[0]}" for c in kernel.checks)
    if need == "device-verified":
        devices = [c.context for c in kernel.checks if c.evidence == "device-verified"]
        todo = (
            "a passing job on a device pool (cuda/npu hardware) is needed; add that pool's check, e.g. "
            "kswarm/verify:npu-910c, to required_checks and submit the kernel there"
            if not devices
            else "a device pool's pass"
        )
    else:
        todo = (
            "a cpu pass that also samples the task's device shapes (cpu-screened), or a device pool's pass, "
            "is needed: submit it again once the cpu pool screens device shapes, or on a device pool"
        )
    return (
        f"{kernel.path} at {short(head)} has {have} evidence ({EVIDENCE_MEANS[have]}; {passes}); "
        f"the policy requires {need}: {todo}"
    )[:800]


def _plain_checks(
    pr: PullRequest,
    head: str,
    contexts: list[str],
    status_setters: set[str] | None,
    decision: GateDecision,
    add: Callable[..., None],
) -> None:
    """Required checks decided by the head's latest commit status of each context."""
    by_context = {s.context: s for s in pr.statuses if s.sha == head}
    for context in contexts:
        status = by_context.get(context)
        if status is not None and status_setters is not None and status.creator not in status_setters:
            decision.notes.append(f"status {context} set by @{status.creator} ignored (not trusted for it)")
            status = None
        if status is None:
            add("check-missing", f"required check {context} has not reported on {short(head)}")
        elif status.state == "pending":
            add("check-pending", f"required check {context} is pending on {short(head)}")
        elif status.state != "success":
            desc = f": {status.description}" if status.description else ""
            add("check-failed", f"required check {context} is {status.state} on {short(head)}{desc}", True)
