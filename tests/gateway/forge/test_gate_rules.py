"""The review gate's rules, each on its own (``gateway/forge/gate/rules.py``), and how they fold.

Every test builds a ``GateContext`` directly and calls one rule: no forge, no Redis, no gateway. A new
rule gets its test here, beside the others.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.forge.gate import policy
from gateway.forge.gate.coverage import KernelCheck, KernelCoverage
from gateway.forge.gate.evidence import Verification
from gateway.forge.gate.kernels import BlockedPath, PRChanges, classify
from gateway.forge.gate.policy import ReviewPolicy, evaluate
from gateway.forge.gate.rules import (
    FINAL_RULES,
    RULES,
    GateContext,
    Reason,
    approvals,
    changes_requested,
    conflict,
    evidence_level,
    human_approvals,
    kernel_checks,
    kernels,
    reproduction,
    required_checks,
    stale_kernels,
    state,
    trusted_paths,
)
from gateway.forge.models import ChangedFile, CommitStatus, PullRequest, Review

HEAD, BASE, OLD = "a" * 40, "b" * 40, "c" * 40
CPU, LINT = "kswarm/verify:cpu", "ci/lint"
ADD, SOFTMAX = "kernels/add/alice_triton.py", "kernels/softmax/alice_triton.py"
_ids = iter(range(1, 10_000))


def pr(*reviews: Review, statuses: tuple[CommitStatus, ...] = (), **fields: object) -> PullRequest:
    base: dict[str, object] = dict(
        org="o", repo="r", number=7, title="t", author="alice", head="alice/x", base="main",
        head_sha=HEAD, base_sha=BASE, mergeable=True, reviews=list(reviews), statuses=list(statuses),
    )  # fmt: skip
    return PullRequest.model_validate({**base, **fields})


def review(user: str, state: str = "APPROVED", commit: str = HEAD, dismissed: bool = False) -> Review:
    n = next(_ids)
    return Review(id=n, user=user, state=state, commit_id=commit, submitted=float(n), dismissed=dismissed)


def status(state: str, context: str = LINT, creator: str = "worker1", description: str = "") -> CommitStatus:
    return CommitStatus(sha=HEAD, context=context, state=state, creator=creator, description=description)


def job(kernel: str, submitter: str = "alice", evidence: str = "cpu-screened") -> Verification:
    """A passing cpu job on ``kernel`` at the head."""
    record: dict[str, object] = dict(
        job_id=f"j{next(_ids):012x}", repo="o/r", sha=HEAD, kernel=kernel, task=kernel.split("/")[1],
        pool="cpu", kind="verify", submitter=submitter, state="succeeded", verdict="pass", evidence=evidence,
    )  # fmt: skip
    return Verification.model_validate(record)


def changed(*paths: str, dataset: bool = False) -> PRChanges:
    files = [ChangedFile(path=p, status="added") for p in paths]
    return classify(files, author="alice", dataset=dataset, trusted_paths=ReviewPolicy().trusted_paths)


def ctx(p: PullRequest | None = None, **kw: object) -> GateContext:
    """A context for ``p`` (an open PR by alice, no reviews) under ``policy`` (one approval, no checks)."""
    chosen = kw.pop("policy", None) or ReviewPolicy(required_approvals=1)
    return GateContext(p or pr(), chosen, **kw)  # type: ignore[arg-type]


def codes(reasons: list[Reason]) -> list[tuple[str, bool]]:
    return [(r.code, r.blocking) for r in reasons]


def kernel(*states: str, evidence: str = "none", required: str | None = "cpu-screened") -> KernelCoverage:
    checks = [
        KernelCheck(context=f"kswarm/verify:p{i}", state=s, message=f"{ADD} {s} on p{i}")
        for i, s in enumerate(states)
    ]
    return KernelCoverage(
        path=ADD,
        task="add",
        status="added",
        checks=checks,
        evidence=evidence,
        required_evidence=required,
    )


# -- state ----------------------------------------------------------------------------------------


def test_state_holds_for_an_open_pr_with_both_branches() -> None:
    assert state(ctx()) == []


@pytest.mark.parametrize(
    ("fields", "code", "message"),
    [
        ({"merged": True, "state": "closed", "merge_sha": OLD}, "merged", f"already merged as {OLD[:10]}"),
        ({"state": "closed"}, "closed", "the PR is closed"),
        ({"head_sha": None}, "no-head", "head branch 'alice/x' does not exist"),
        ({"base_sha": None}, "no-base", "base branch 'main' does not exist"),
    ],
)
def test_state_blocks_a_pr_that_is_not_open_or_lost_a_branch(
    fields: dict[str, Any], code: str, message: str
) -> None:
    assert state(ctx(pr(**fields))) == [Reason(code=code, message=message, blocking=True)]


def test_a_failed_state_is_the_whole_decision() -> None:
    """The state rule ends the fold: a closed PR shows no approvals, notes or other reasons."""
    assert state in FINAL_RULES
    decision = evaluate(
        pr(review("alice"), mergeable=False, state="closed"), ReviewPolicy(required_checks=[LINT])
    )
    assert codes(decision.reasons) == [("closed", True)]
    assert decision.notes == [] and decision.approvals == [] and not decision.mergeable


# -- conflict -------------------------------------------------------------------------------------


def test_conflict_blocks_only_when_the_forge_says_so() -> None:
    assert conflict(ctx(pr(mergeable=None))) == []  # not computed yet: waiting is not a conflict
    assert conflict(ctx(pr(mergeable=True))) == []
    [reason] = conflict(ctx(pr(mergeable=False)))
    assert reason == Reason(
        code="conflict", message="alice/x conflicts with main: rebase or merge main and push", blocking=True
    )


# -- trusted paths and stale kernels --------------------------------------------------------------


def test_trusted_paths_block_with_the_classifiers_reason() -> None:
    changes = changed("tasks/add/task.yaml", ADD, dataset=True)
    reasons = trusted_paths(ctx(changes=changes))
    assert codes(reasons) == [("trusted-path", True)]
    assert reasons[0].message == changes.blocked[0].why and "tasks/add/task.yaml" in reasons[0].message
    assert trusted_paths(ctx(changes=changed(ADD, dataset=True))) == []
    assert trusted_paths(ctx()) == []  # without the gate's facts there are no paths to judge


def test_stale_kernels_block_each_one() -> None:
    stale = [
        BlockedPath(path=ADD, why="add changed on main too"),
        BlockedPath(path=SOFTMAX, why="softmax too"),
    ]
    reasons = stale_kernels(ctx(changes=PRChanges(stale=stale)))
    assert reasons == [
        Reason(code="kernel-stale", message="add changed on main too", blocking=True),
        Reason(code="kernel-stale", message="softmax too", blocking=True),
    ]
    assert stale_kernels(ctx(changes=PRChanges())) == []


# -- changes requested ----------------------------------------------------------------------------


def test_a_change_request_blocks_until_that_reviewer_approves() -> None:
    request = review("bob", "REQUEST_CHANGES", OLD)
    [reason] = changes_requested(ctx(pr(request, review("carol"))))
    assert reason == Reason(
        code="changes-requested",
        message=f"@bob requested changes (on {OLD[:10]}); it blocks until @bob approves a later head",
        blocking=True,
    )
    assert changes_requested(ctx(pr(request, review("bob")))) == []
    assert changes_requested(ctx(pr(request, review("bob", "COMMENT")))) != []  # a comment is no verdict


def test_change_requests_are_listed_by_reviewer() -> None:
    reasons = changes_requested(ctx(pr(review("dave", "REQUEST_CHANGES"), review("bob", "REQUEST_CHANGES"))))
    assert [r.message[:5] for r in reasons] == ["@bob ", "@dave"]


# -- reproduction ---------------------------------------------------------------------------------

REPRODUCE = ReviewPolicy(required_approvals=1, required_checks=[CPU], require_reproduction=True)


def test_reproduction_is_not_asked_by_default() -> None:
    assert reproduction(ctx(pr(review("bob")), changes=changed(ADD), evidence=[])) == []


def test_reproduction_needs_the_reviewers_own_pass_on_every_kernel() -> None:
    p = pr(review("bob"))
    own = ctx(
        p, policy=REPRODUCE, changes=changed(ADD, SOFTMAX), evidence=[job(ADD, "bob"), job(SOFTMAX, "bob")]
    )
    assert reproduction(own) == [] and own.approvals.agents == ["bob"]
    partial = ctx(
        p, policy=REPRODUCE, changes=changed(ADD, SOFTMAX), evidence=[job(ADD, "bob"), job(SOFTMAX)]
    )
    assert reproduction(partial) == [
        Reason(
            code="reproduction",
            message=f"@bob approved but has not verified {SOFTMAX} at {HEAD[:10]} "
            "with a passing job of their own",
        )
    ]
    assert partial.approvals.agents == [] and partial.approvals.unreproduced == {"bob": [SOFTMAX]}


def test_reproduction_without_records_never_holds() -> None:
    """The embedded forge's own merge check has no records: an approval cannot be reproduced there."""
    [reason] = reproduction(ctx(pr(review("bob")), policy=REPRODUCE))
    assert "(no verification records)" in reason.message and not reason.blocking


# -- approvals ------------------------------------------------------------------------------------


def test_approvals_count_other_agents_on_the_head() -> None:
    assert approvals(ctx(pr(review("bob")))) == []
    assert approvals(ctx(pr(review("bob")), policy=ReviewPolicy(required_approvals=0))) == []
    [reason] = approvals(ctx(pr(review("alice"))))  # the author's own approval never counts
    assert reason == Reason(
        code="approvals", message=f"0 of 1 approval(s) on head {HEAD[:10]} from reviewers other than @alice"
    )


def test_approvals_on_an_older_head_are_named_in_the_reason() -> None:
    [reason] = approvals(ctx(pr(review("bob", commit=OLD)), operators=set()))
    assert reason.message == (
        f"0 of 1 approval(s) on head {HEAD[:10]} from agents other than @alice "
        f"(approval by @bob was on {OLD[:10]}, not the head {HEAD[:10]})"
    )


def test_an_operators_approval_is_not_an_agents() -> None:
    c = ctx(pr(review("op")), operators={"op"})
    assert codes(approvals(c)) == [("approvals", False)] and c.approvals.humans == ["op"]
    assert approvals(ctx(pr(review("op")))) == []  # without the operators known, as in Gitea


def test_an_operators_approval_counts_toward_the_required_ones_where_the_policy_says_so() -> None:
    counting = ReviewPolicy(operator_approvals_count=True)
    assert approvals(ctx(pr(review("op")), policy=counting, operators={"op"})) == []
    [reason] = approvals(ctx(pr(review("op", commit=OLD)), policy=counting, operators={"op"}))
    assert "from reviewers other than" in reason.message  # agents and operators alike now


def test_what_an_operators_approval_counts_for_is_said_in_words() -> None:
    said = policy.operator_approval_counts
    assert said(ReviewPolicy()) == (
        "it does not count toward merging: the policy requires 1 approval(s) from agents "
        "(review.operator_approvals_count: true counts an operator's too)"
    )
    assert said(ReviewPolicy(operator_approvals_count=True)) == (
        "it counts toward the 1 required approval(s) the policy requires"
    )
    assert said(HUMAN) == "it counts toward the 1 human approval(s) the policy requires"
    assert said(ReviewPolicy(required_approvals=0)) == "the policy requires no approval"


# -- human approvals ------------------------------------------------------------------------------

HUMAN = ReviewPolicy(required_approvals=0, human_approvals=1)


def test_human_approvals_are_not_asked_by_default() -> None:
    assert human_approvals(ctx(operators={"op"})) == []


def test_human_approvals_count_operators_on_the_head() -> None:
    assert human_approvals(ctx(pr(review("op")), policy=HUMAN, operators={"op"})) == []
    [reason] = human_approvals(ctx(pr(review("bob")), policy=HUMAN, operators={"op"}))
    assert reason == Reason(
        code="human-approvals",
        message=f"0 of 1 human approval(s) on head {HEAD[:10]}: an operator approves with "
        "`kswarm pr review 7 --approve` or in the UI",
    )
    two = ReviewPolicy(required_approvals=0, human_approvals=2)
    [reason] = human_approvals(ctx(pr(review("op")), policy=two, operators={"op"}))
    assert reason.message.startswith("1 of 2") and reason.message.endswith("(so far: @op)")


# -- kernels: evidence level and kernel checks ----------------------------------------------------


def test_evidence_level_blocks_a_kernel_whose_passes_prove_too_little() -> None:
    weak = kernel("insufficient", evidence="cpu-shapes-only")
    [reason] = evidence_level(ctx(), weak)
    assert reason.code == "kernel-evidence" and reason.blocking
    assert reason.message.startswith(f"{ADD} at {HEAD[:10]} has cpu-shapes-only evidence (")
    assert "the policy requires cpu-screened" in reason.message
    device = ctx(policy=ReviewPolicy(min_evidence="device-verified"))
    assert "device pool" in evidence_level(device, weak)[0].message
    for fine in ("success", "failure", "pending", "missing"):
        assert evidence_level(ctx(), kernel(fine)) == []


def test_kernel_checks_fail_wait_or_ask_for_a_job() -> None:
    k = kernel("success", "failure", "pending", "missing", "insufficient")
    reasons = kernel_checks(ctx(), k)
    assert codes(reasons) == [
        ("kernel-failed", True),
        ("kernel-pending", False),
        ("kernel-unverified", False),
    ]
    assert [r.message for r in reasons] == [c.message for c in k.checks[1:4]]


def test_kernels_keep_each_kernels_reasons_together() -> None:
    """Rule by rule within a kernel, kernel by kernel in path order: add's missing job reads before
    softmax's weak pass, which a fold of evidence_level over every kernel first would reverse."""
    policy = ReviewPolicy(required_checks=[CPU])
    weak = job(SOFTMAX, evidence="cpu-shapes-only")
    reasons = kernels(ctx(policy=policy, changes=changed(SOFTMAX, ADD), evidence=[weak]))
    assert codes(reasons) == [("kernel-unverified", False), ("kernel-evidence", True)]
    assert reasons[0].message.startswith(ADD) and reasons[1].message.startswith(SOFTMAX)
    assert kernels(ctx(policy=policy)) == []  # without the gate's facts, no kernel is judged


# -- required checks (commit statuses) ------------------------------------------------------------

CHECKED = ReviewPolicy(required_approvals=0, required_checks=[LINT])


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ((status("success"),), []),
        ((), [("check-missing", False)]),
        ((status("pending"),), [("check-pending", False)]),
        ((status("failure"),), [("check-failed", True)]),
        ((status("success", context="other"),), [("check-missing", False)]),
    ],
)
def test_required_checks_read_the_heads_statuses(
    statuses: tuple[CommitStatus, ...], expected: list[tuple[str, bool]]
) -> None:
    assert codes(required_checks(ctx(pr(statuses=statuses), policy=CHECKED))) == expected


def test_a_failed_check_says_what_failed() -> None:
    [reason] = required_checks(ctx(pr(statuses=(status("error", description="boom"),)), policy=CHECKED))
    assert reason.message == f"required check {LINT} is error on {HEAD[:10]}: boom"


def test_a_status_from_someone_untrusted_counts_as_none() -> None:
    c = ctx(pr(statuses=(status("success", creator="alice"),)), policy=CHECKED, status_setters={"worker1"})
    assert codes(required_checks(c)) == [("check-missing", False)]
    assert c.notes == [f"status {LINT} set by @alice ignored (not trusted for it)"]


def test_kswarm_checks_are_statuses_only_without_the_gates_facts() -> None:
    policy = ReviewPolicy(required_approvals=0, required_checks=[CPU, LINT])
    p = pr(statuses=(status("success"),))
    assert codes(required_checks(ctx(p, policy=policy))) == [("check-missing", False)]  # CPU, as a status
    assert required_checks(ctx(p, policy=policy, changes=changed(), evidence=[])) == []  # CPU is per kernel


# -- the fold -------------------------------------------------------------------------------------


def test_evaluate_lists_every_rules_reasons_in_rule_order() -> None:
    """One PR that breaks every rule but state: its reasons read in the order of RULES (and, per kernel,
    of KERNEL_RULES), which is what pr why, the UI, the audit and #reviews show."""
    p = pr(review("bob", "REQUEST_CHANGES"), review("carol"), review("alice"), mergeable=False)
    policy = ReviewPolicy(
        required_approvals=1,
        human_approvals=1,
        required_checks=[CPU, LINT],
        require_reproduction=True,
        dataset=True,
    )
    files = [ChangedFile(path=ADD, status="added"), ChangedFile(path=SOFTMAX, status="modified")]
    files.append(ChangedFile(path="tasks/add/task.yaml", status="modified"))
    changes = classify(
        files, author="alice", dataset=True, trusted_paths=policy.trusted_paths, base_changed={SOFTMAX}
    )
    decision = evaluate(p, policy, changes=changes, evidence=[], operators=set(), status_setters={"worker1"})
    assert [r.code for r in decision.reasons] == [
        "conflict",
        "trusted-path",
        "kernel-stale",
        "changes-requested",
        "reproduction",
        "approvals",
        "human-approvals",
        "kernel-unverified",
        "kernel-unverified",
        "check-missing",
    ]
    assert decision.notes == [
        "approval by the author @alice ignored",
        "approval by @carol not counted: no passing reproduction",
    ]
    assert not decision.mergeable and decision.approvals == [] and decision.blocked_paths == changes.blocked


def test_a_new_rule_is_one_function_and_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the walkthrough in docs/architecture.md promises: the fold needs no other change."""

    def titled(c: GateContext) -> list[Reason]:
        return [] if c.pr.title.strip() else [Reason(code="title", message="the PR has no title")]

    monkeypatch.setattr(policy, "RULES", (*RULES, titled))
    assert evaluate(pr(review("bob")), ReviewPolicy()).mergeable
    decision = evaluate(pr(review("bob"), title=" "), ReviewPolicy())
    assert codes(decision.reasons) == [("title", False)] and not decision.mergeable
