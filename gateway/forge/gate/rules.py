"""The review gate's rules: one small function per rule, folded in order by ``policy.evaluate``.

Every rule takes the same ``GateContext`` (the PR, its branch's policy and what the caller knows about
it) and returns its reasons, an empty list when it holds. ``RULES`` is the order they run in, which is
also the order of the reasons a PR shows (``pr why``, the UI, the audit list, the ``#reviews``
announcement), so a new rule goes where its reason should read. A new rule is one function here, one
line in ``RULES`` (or ``KERNEL_RULES`` for a rule about one changed kernel) and one test in
``tests/gateway/forge/test_gate_rules.py``, which builds a context directly: no forge, no Redis.

The facts several rules share (each reviewer's latest verdict, whose approval counts, each kernel's
coverage, which statuses are trusted) are computed once, lazily, on the context; the rules only read
them. The notes of a decision (things ignored, and why) are facts of the context too, not of a rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from gateway.forge.gate.coverage import KernelCoverage, reproduced_by
from gateway.forge.gate.coverage import coverage as kernel_coverage
from gateway.forge.gate.coverage import kernel_checks as kswarm_checks
from gateway.forge.gate.evidence import EVIDENCE_MEANS, Verification, parse_check_context
from gateway.forge.gate.kernels import Candidate, PRChanges
from gateway.forge.models import CommitStatus, PullRequest, Review

if TYPE_CHECKING:
    # The rules only read the policy; policy.py imports this module to fold them, so importing it
    # back at run time would be a cycle between siblings (lint-imports refuses those).
    from gateway.forge.gate.policy import ReviewPolicy


class Reason(BaseModel):
    code: str = Field(description="Machine-readable reason, e.g. changes-requested, check-missing.")
    message: str
    blocking: bool = Field(
        False, description="True for hard blocks (change request, failed check, conflict); False: waiting."
    )


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


@dataclass
class Approvals:
    """Whose approval on the head counts, and why the others do not (reviewers in name order)."""

    agents: list[str] = field(default_factory=list)
    humans: list[str] = field(default_factory=list)
    # reviewer -> the changed kernels they approved without a passing job of their own
    unreproduced: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class GateContext:
    """What a rule may look at. ``changes`` and ``evidence`` are given by the gate only: with both,
    kswarm checks are decided per changed kernel from the verification records; without them (the
    embedded forge refusing a merge as Gitea would) every required check is a plain commit status.
    ``status_setters``: the principals whose statuses count (None: everyone's). ``operators``: the
    operator principals, whose approvals count as human ones (None: every approval is an agent's)."""

    pr: PullRequest
    policy: ReviewPolicy
    changes: PRChanges | None = None
    evidence: list[Verification] | None = None
    status_setters: set[str] | None = None
    operators: set[str] | None = None

    @property
    def head(self) -> str:
        # Every rule after ``state`` runs only when the head exists.
        return self.pr.head_sha or ""

    @property
    def by_kernel(self) -> bool:
        return self.changes is not None and self.evidence is not None

    @property
    def candidates(self) -> list[Candidate]:
        return self.changes.candidates if self.changes is not None else []

    @cached_property
    def verdicts(self) -> dict[str, Review]:
        return latest_verdicts(self.pr)

    @cached_property
    def approvals(self) -> Approvals:
        """Sort each reviewer's approval: on an older head (a note), a human's, an agent's that lacks
        the reproduction the policy asks for (not counted), or an agent's that counts."""
        out = Approvals()
        for user, review in sorted(self.verdicts.items()):
            if review.state != "APPROVED":
                continue
            if review.commit_id != self.head:
                out.notes.append(
                    f"approval by @{user} was on {short(review.commit_id)}, not the head {short(self.head)}"
                )
                continue
            if self.operators is not None and user in self.operators:
                out.humans.append(user)  # a human's approval: counted apart, never as an agent's review
                continue
            if self.policy.require_reproduction:
                missing = (
                    reproduced_by(
                        user, self.head, self.candidates, self.evidence or [], self.policy.required_checks
                    )
                    if self.by_kernel
                    else ["(no verification records)"]  # a status-only caller can never see one
                )
                if missing:
                    out.unreproduced[user] = missing
                    out.notes.append(f"approval by @{user} not counted: no passing reproduction")
                    continue
            out.agents.append(user)
        return out

    @property
    def review_notes(self) -> list[str]:
        """The notes about reviews: the author's own approval, then each reviewer's in name order."""
        author = any(r.user == self.pr.author and r.state == "APPROVED" for r in self.pr.reviews)
        own = [f"approval by the author @{self.pr.author} ignored"] if author else []
        return own + self.approvals.notes

    @cached_property
    def kernels(self) -> list[KernelCoverage]:
        """Each changed kernel's standing on each required kswarm check (only with the gate's facts)."""
        if not self.by_kernel:
            return []
        return kernel_coverage(
            self.head,
            self.candidates,
            self.evidence or [],
            self.policy.required_checks,
            self.policy.min_evidence,
        )

    @property
    def plain_checks(self) -> list[str]:
        """The required checks decided by a commit status: all of them without the gate's facts, else
        all but the kswarm ones (those are decided per kernel)."""
        return [c for c in self.policy.required_checks if not (self.by_kernel and parse_check_context(c))]

    def head_status(self, context: str) -> CommitStatus | None:
        """The head's latest status of ``context``, whoever set it."""
        by_context = {s.context: s for s in self.pr.statuses if s.sha == self.pr.head_sha}
        return by_context.get(context)

    def trusts(self, status: CommitStatus) -> bool:
        return self.status_setters is None or status.creator in self.status_setters

    @property
    def notes(self) -> list[str]:
        """Things ignored, and why, in the order the decision lists them."""
        notes = self.review_notes
        if self.by_kernel and kswarm_checks(self.policy.required_checks) and not self.candidates:
            notes.append("no kernels changed: no verification needed")
        for context in self.plain_checks:
            status = self.head_status(context)
            if status is not None and not self.trusts(status):
                notes.append(f"status {context} set by @{status.creator} ignored (not trusted for it)")
        return notes


Rule = Callable[[GateContext], list[Reason]]
KernelRule = Callable[[GateContext, KernelCoverage], list[Reason]]


def state(ctx: GateContext) -> list[Reason]:
    """The PR is open and both its branches exist. One of ``FINAL_RULES``: when it fails, its reason
    is the whole decision (there is no head to judge anything else at)."""
    pr = ctx.pr
    if pr.merged:
        return [Reason(code="merged", message=f"already merged as {short(pr.merge_sha)}", blocking=True)]
    if pr.state != "open":
        return [Reason(code="closed", message="the PR is closed", blocking=True)]
    if pr.head_sha is None:
        return [Reason(code="no-head", message=f"head branch {pr.head!r} does not exist", blocking=True)]
    if pr.base_sha is None:
        return [Reason(code="no-base", message=f"base branch {pr.base!r} does not exist", blocking=True)]
    return []


def conflict(ctx: GateContext) -> list[Reason]:
    """The head merges cleanly into the base (None: the forge does not know yet, which does not block)."""
    pr = ctx.pr
    if pr.mergeable is False:
        message = f"{pr.head} conflicts with {pr.base}: rebase or merge {pr.base} and push"
        return [Reason(code="conflict", message=message, blocking=True)]
    return []


def trusted_paths(ctx: GateContext) -> list[Reason]:
    """No changed path is one only operators change (dataset branches; ``kernels.classify`` decides)."""
    blocked = ctx.changes.blocked if ctx.changes is not None else []
    return [Reason(code="trusted-path", message=b.why, blocking=True) for b in blocked]


def stale_kernels(ctx: GateContext) -> list[Reason]:
    """No changed kernel was also changed on the base since the fork (the merge would hold a file
    nobody verified)."""
    stale = ctx.changes.stale if ctx.changes is not None else []
    return [Reason(code="kernel-stale", message=s.why, blocking=True) for s in stale]


def changes_requested(ctx: GateContext) -> list[Reason]:
    """No reviewer's latest verdict is a change request (it clears when they approve a later head)."""
    return [
        Reason(
            code="changes-requested",
            message=f"@{user} requested changes (on {short(review.commit_id)}); it blocks until @{user} "
            "approves a later head",
            blocking=True,
        )
        for user, review in sorted(ctx.verdicts.items())
        if review.state == "REQUEST_CHANGES"
    ]


def reproduction(ctx: GateContext) -> list[Reason]:
    """With ``require_reproduction``: each agent who approved the head verified every changed kernel
    there with a passing job of their own (else their approval does not count, and this says why)."""
    return [
        Reason(
            code="reproduction",
            message=f"@{user} approved but has not verified {', '.join(missing)} at {short(ctx.head)} "
            "with a passing job of their own",
        )
        for user, missing in ctx.approvals.unreproduced.items()
    ]


def approvals(ctx: GateContext) -> list[Reason]:
    """Enough agents other than the author approved the head (``required_approvals``); operators'
    approvals count too where the policy says so (``operator_approvals_count``)."""
    have, need = ctx.approvals.agents, ctx.policy.required_approvals
    if ctx.policy.operator_approvals_count:
        have = [*have, *ctx.approvals.humans]
    if len(have) >= need:
        return []
    stale = [n for n in ctx.review_notes if "not the head" in n]
    extra = f" ({'; '.join(stale)})" if stale else ""
    who = "agents" if ctx.operators is not None and not ctx.policy.operator_approvals_count else "reviewers"
    message = (
        f"{len(have)} of {need} approval(s) on head {short(ctx.head)} from {who} other than "
        f"@{ctx.pr.author}{extra}"
    )
    return [Reason(code="approvals", message=message)]


def human_approvals(ctx: GateContext) -> list[Reason]:
    """Enough operators approved the head (``human_approvals``; none asked for by default)."""
    humans, need = ctx.approvals.humans, ctx.policy.human_approvals
    if not need or len(humans) >= need:
        return []
    have = f" (so far: {', '.join('@' + h for h in humans)})" if humans else ""
    message = (
        f"{len(humans)} of {need} human approval(s) on head {short(ctx.head)}: an operator approves "
        f"with `kswarm pr review {ctx.pr.number} --approve` or in the UI{have}"
    )
    return [Reason(code="human-approvals", message=message)]


def evidence_level(ctx: GateContext, kernel: KernelCoverage) -> list[Reason]:
    """The kernel's passes prove at least ``min_evidence`` (``coverage`` marks every check of a kernel
    that passed below it ``insufficient``; while one is pending or missing, nothing is yet)."""
    if any(c.state == "insufficient" for c in kernel.checks):
        return [Reason(code="kernel-evidence", message=evidence_reason(kernel, ctx), blocking=True)]
    return []


# A kernel check's state -> (reason code, blocking); success needs no reason, and insufficient is
# ``evidence_level``'s (one reason per kernel, not one per check).
CHECK_REASONS: dict[str, tuple[str, bool]] = {
    "failure": ("kernel-failed", True),
    "pending": ("kernel-pending", False),
    "missing": ("kernel-unverified", False),
}


def kernel_checks(ctx: GateContext, kernel: KernelCoverage) -> list[Reason]:
    """The kernel passed every required kswarm check at the head: a failure blocks, a job still
    running or none at all waits."""
    return [
        Reason(code=CHECK_REASONS[c.state][0], message=c.message, blocking=CHECK_REASONS[c.state][1])
        for c in kernel.checks
        if c.state in CHECK_REASONS
    ]


# Rules about one changed kernel, applied kernel by kernel so that a kernel's reasons stay together.
KERNEL_RULES: tuple[KernelRule, ...] = (evidence_level, kernel_checks)


def kernels(ctx: GateContext) -> list[Reason]:
    """Each changed kernel through ``KERNEL_RULES`` (only with the gate's facts: else no kernels)."""
    return [reason for kernel in ctx.kernels for rule in KERNEL_RULES for reason in rule(ctx, kernel)]


def required_checks(ctx: GateContext) -> list[Reason]:
    """Every required check decided by a commit status is ``success`` on the head, set by someone
    trusted for it (a status by anyone else counts as none)."""
    out: list[Reason] = []
    head = short(ctx.head)
    for context in ctx.plain_checks:
        status = ctx.head_status(context)
        if status is None or not ctx.trusts(status):
            out.append(
                Reason(code="check-missing", message=f"required check {context} has not reported on {head}")
            )
        elif status.state == "pending":
            out.append(Reason(code="check-pending", message=f"required check {context} is pending on {head}"))
        elif status.state != "success":
            desc = f": {status.description}" if status.description else ""
            message = f"required check {context} is {status.state} on {head}{desc}"
            out.append(Reason(code="check-failed", message=message, blocking=True))
    return out


# The order rules run in and their reasons read in. Adding a rule: its function above, one line here.
RULES: tuple[Rule, ...] = (
    state,
    conflict,
    trusted_paths,
    stale_kernels,
    changes_requested,
    reproduction,
    approvals,
    human_approvals,
    kernels,
    required_checks,
)
# Rules whose failure ends the fold: nothing after them has anything to judge.
FINAL_RULES: frozenset[Rule] = frozenset({state})


def evidence_reason(kernel: KernelCoverage, ctx: GateContext) -> str:
    """Why a kernel whose required checks all passed is still not enough, and what would be."""
    have, need = kernel.evidence, ctx.policy.min_evidence
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
        f"{kernel.path} at {short(ctx.head)} has {have} evidence ({EVIDENCE_MEANS[have]}; {passes}); "
        f"the policy requires {need}: {todo}"
    )[:800]
