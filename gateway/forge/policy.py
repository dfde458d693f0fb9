"""The review policy and its evaluation: a pure function from a PR's facts to a decision with reasons.

Both the embedded forge (refusing a merge while protection is unmet, as Gitea does) and the gate bot
(deciding to merge) call ``evaluate``; only the gate passes reproduction results.
"""

from __future__ import annotations

import time

from pydantic import BaseModel, Field

from gateway.forge.models import PullRequest, Review


class ReviewPolicy(BaseModel):
    """What a protected branch requires before the gate merges into it."""

    required_approvals: int = Field(1, ge=0, description="Approvals on the head sha, never by the author.")
    required_checks: list[str] = Field(
        default_factory=list, description="Status contexts that must be success on the head sha."
    )
    require_reproduction: bool = Field(
        False, description="An approval counts only if its reviewer reproduced the head sha (passed)."
    )
    protected_branches: list[str] = Field(
        default_factory=lambda: ["main"], description="Branches only the gate merges into."
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
    notes: list[str] = Field(default_factory=list, description="Things ignored, and why.")
    ts: float = Field(default_factory=time.time)

    def summary(self) -> str:
        if self.mergeable:
            return "mergeable: every rule holds"
        return "; ".join(r.message for r in self.reasons)


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
    reproductions: dict[str, bool] | None = None,
    status_setters: set[str] | None = None,
) -> GateDecision:
    """Why ``pr`` may or may not be merged now.

    ``reproductions`` maps reviewer -> passed for the head sha; it is consulted only when the policy
    requires reproduction. ``status_setters``, when given, are the principals whose statuses count
    (workers); statuses by anyone else are ignored with a note.
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
    for user, review in sorted(verdicts.items()):
        if review.state != "APPROVED":
            continue
        if review.commit_id != head:
            decision.notes.append(
                f"approval by @{user} was on {short(review.commit_id)}, not the head {short(head)}"
            )
            continue
        if policy.require_reproduction and not (reproductions or {}).get(user, False):
            decision.notes.append(f"approval by @{user} not counted: no passing reproduction")
            add("reproduction", f"@{user} approved but has not reproduced {short(head)} with a passing job")
            continue
        approvals.append(user)
    decision.approvals = approvals
    if len(approvals) < policy.required_approvals:
        stale = [n for n in decision.notes if "not the head" in n]
        extra = f" ({'; '.join(stale)})" if stale else ""
        add(
            "approvals",
            f"{len(approvals)} of {policy.required_approvals} approval(s) on head {short(head)} "
            f"from reviewers other than @{pr.author}{extra}",
        )

    by_context = {s.context: s for s in pr.statuses if s.sha == head}
    for context in policy.required_checks:
        status = by_context.get(context)
        if status is not None and status_setters is not None and status.creator not in status_setters:
            decision.notes.append(f"status {context} set by @{status.creator} (not a worker) ignored")
            status = None
        if status is None:
            add("check-missing", f"required check {context} has not reported on {short(head)}")
        elif status.state == "pending":
            add("check-pending", f"required check {context} is pending on {short(head)}")
        elif status.state != "success":
            desc = f": {status.description}" if status.description else ""
            add("check-failed", f"required check {context} is {status.state} on {short(head)}{desc}", True)

    decision.mergeable = not reasons
    return decision
