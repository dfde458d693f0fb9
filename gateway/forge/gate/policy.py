"""The review policy and its evaluation: a pure function from a PR's facts to a decision with reasons.

Both the embedded forge (refusing a merge while protection is unmet, as Gitea does) and the gate bot
(deciding to merge) call ``evaluate``; only the gate passes the PR's classified changes and its head's
verification records, so only the gate decides kswarm checks per changed kernel. The rules themselves,
one function each, are ``rules.py``; ``evaluate`` folds them into a ``GateDecision``.
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel, Field

from gateway.forge.gate.coverage import KernelCoverage
from gateway.forge.gate.evidence import EVIDENCE_LEVELS, Verification, evidence_rank
from gateway.forge.gate.kernels import DEFAULT_TRUSTED_PATHS, BlockedPath, PRChanges
from gateway.forge.gate.rules import FINAL_RULES, RULES, GateContext, Reason
from gateway.forge.models import PullRequest

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
    operator_approvals_count: bool = Field(
        False,
        description="An operator's approval on the head also counts toward required_approvals (it always "
        "counts toward human_approvals); off: only agents' approvals do.",
    )
    required_checks: list[str] = Field(
        default_factory=list,
        description="Status contexts that must be success on the head sha. kswarm/<kind>:<pool> (e.g. "
        "kswarm/verify:cpu) means: every kernel the PR changes passed a <kind> job on <pool> at the head.",
    )
    min_evidence: MinEvidence = Field(
        DEFAULT_MIN_EVIDENCE,
        description="The least a changed kernel's passes on the required kswarm checks must prove "
        "(docs/verification.md, evidence levels): cpu-shapes-only (any pass), cpu-screened (the cpu "
        "interpreter also sampled the "
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


def evaluate(
    pr: PullRequest,
    policy: ReviewPolicy,
    *,
    changes: PRChanges | None = None,
    evidence: list[Verification] | None = None,
    status_setters: set[str] | None = None,
    operators: set[str] | None = None,
) -> GateDecision:
    """Why ``pr`` may or may not be merged now: the reasons of every rule in ``rules.RULES``, in
    that order (``mergeable`` when there are none).

    With ``changes`` and ``evidence`` (the gate), every kswarm check (``kswarm/<kind>:<pool>``) is
    decided per changed kernel from the verification records, dataset rules apply, and reproduction is
    checked per kernel; without them (the embedded forge refusing a merge as Gitea would) required
    checks are plain commit statuses. ``status_setters``, when given, are the principals whose statuses
    count; statuses by anyone else are ignored with a note. ``operators``, when given, are the
    operator principals: their approvals count toward ``human_approvals`` and not toward
    ``required_approvals`` (without it every approval counts toward the latter, as in Gitea).
    """
    ctx = GateContext(pr, policy, changes, evidence, status_setters, operators)
    decision = GateDecision(repo=pr.full_name, number=pr.number, head_sha=pr.head_sha, mergeable=False)
    for rule in RULES:
        found = rule(ctx)
        decision.reasons += found
        if found and rule in FINAL_RULES:
            return decision  # a closed PR or a missing branch: its reason is the whole decision
    decision.approvals = list(ctx.approvals.agents)
    decision.human_approvals = list(ctx.approvals.humans)
    decision.notes = ctx.notes
    decision.kernels = list(ctx.kernels)
    decision.blocked_paths = list(changes.blocked) if changes is not None else []
    decision.mergeable = not decision.reasons
    return decision


def operator_approval_counts(policy: ReviewPolicy) -> str:
    """What an operator's approval counts for under ``policy``, in words for the operator (the review
    action's answer, ``kswarm pr review``, the PR page)."""
    toward = []
    if policy.operator_approvals_count and policy.required_approvals:
        toward.append(f"the {policy.required_approvals} required approval(s)")
    if policy.human_approvals:
        toward.append(f"the {policy.human_approvals} human approval(s)")
    if toward:
        return "it counts toward " + " and ".join(toward) + " the policy requires"
    if not policy.required_approvals:
        return "the policy requires no approval"
    return (
        f"it does not count toward merging: the policy requires {policy.required_approvals} approval(s) "
        "from agents (review.operator_approvals_count: true counts an operator's too)"
    )
