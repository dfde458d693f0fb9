"""The review policy as a pure function: each rule on its own, and how they combine."""

from __future__ import annotations

from gateway.forge.gate.policy import ReviewPolicy, evaluate
from gateway.forge.models import CommitStatus, PullRequest, Review

HEAD, OLD = "a" * 40, "b" * 40
CHECK = "kswarm/verify:cpu"
_ids = iter(range(1, 10_000))


def pr(*reviews: Review, statuses: tuple[CommitStatus, ...] = (), **fields: object) -> PullRequest:
    base = dict(org="o", repo="r", number=1, title="t", author="alice", head="alice/x", base="main")
    base.update(head_sha=HEAD, base_sha=OLD, mergeable=True, reviews=list(reviews), statuses=list(statuses))
    base.update(fields)
    return PullRequest.model_validate(base)


def review(user: str, state: str, commit: str = HEAD, dismissed: bool = False) -> Review:
    n = next(_ids)
    return Review(id=n, user=user, state=state, commit_id=commit, submitted=float(n), dismissed=dismissed)


def status(state: str, context: str = CHECK, creator: str = "worker1") -> CommitStatus:
    return CommitStatus(sha=HEAD, context=context, state=state, creator=creator)


POLICY = ReviewPolicy(required_approvals=1, required_checks=[CHECK])


def codes(p: PullRequest, policy: ReviewPolicy = POLICY, **kw: object) -> set[str]:
    return {r.code for r in evaluate(p, policy, **kw).reasons}  # type: ignore[arg-type]


def test_all_rules_hold() -> None:
    decision = evaluate(pr(review("bob", "APPROVED"), statuses=(status("success"),)), POLICY)
    assert decision.mergeable and decision.approvals == ["bob"] and decision.reasons == []


def test_author_approval_never_counts() -> None:
    decision = evaluate(pr(review("alice", "APPROVED"), statuses=(status("success"),)), POLICY)
    assert not decision.mergeable and {r.code for r in decision.reasons} == {"approvals"}
    assert any("author" in n for n in decision.notes)


def test_approval_on_an_older_head_does_not_count() -> None:
    assert codes(pr(review("bob", "APPROVED", OLD), statuses=(status("success"),))) == {"approvals"}
    dismissed = review("bob", "APPROVED", HEAD, dismissed=True)
    assert codes(pr(dismissed, statuses=(status("success"),))) == {"approvals"}


def test_change_request_blocks_until_the_same_reviewer_approves() -> None:
    rc = review("bob", "REQUEST_CHANGES", OLD)
    ok = (status("success"),)
    assert codes(pr(rc, review("carol", "APPROVED"), statuses=ok)) == {"changes-requested"}
    assert codes(pr(rc, review("bob", "COMMENT"), statuses=ok)) == {"changes-requested", "approvals"}
    assert codes(pr(rc, review("bob", "APPROVED"), statuses=ok)) == set()
    # an approval that a push later dismissed still superseded the change request
    assert codes(pr(rc, review("bob", "APPROVED", OLD, dismissed=True), statuses=ok)) == {"approvals"}


def test_required_checks() -> None:
    ok = review("bob", "APPROVED")
    assert codes(pr(ok)) == {"check-missing"}
    assert codes(pr(ok, statuses=(status("pending"),))) == {"check-pending"}
    decision = evaluate(pr(ok, statuses=(status("failure"),)), POLICY)
    assert [(r.code, r.blocking) for r in decision.reasons] == [("check-failed", True)]
    assert codes(pr(ok, statuses=(status("success", "other"),))) == {"check-missing"}
    # statuses count only from the given setters (workers)
    fake = (status("success", creator="alice"),)
    assert codes(pr(ok, statuses=fake), status_setters={"worker1"}) == {"check-missing"}


def test_reproduction_rule_without_records_never_counts() -> None:
    """Status mode (the embedded forge's own merge check) has no records: reproduction cannot hold."""
    policy = POLICY.model_copy(update={"require_reproduction": True})
    p = pr(review("bob", "APPROVED"), statuses=(status("success"),))
    assert codes(p, policy) == {"reproduction", "approvals"}


def test_two_approvals_and_state() -> None:
    policy = POLICY.model_copy(update={"required_approvals": 2})
    ok = (status("success"),)
    assert codes(pr(review("bob", "APPROVED"), statuses=ok), policy) == {"approvals"}
    assert codes(pr(review("bob", "APPROVED"), review("carol", "APPROVED"), statuses=ok), policy) == set()
    assert codes(pr(review("bob", "APPROVED"), review("bob", "APPROVED"), statuses=ok), policy) == {
        "approvals"
    }
    assert codes(pr(mergeable=False, statuses=ok), ReviewPolicy(required_approvals=0)) == {"conflict"}
    assert codes(pr(head_sha=None)) == {"no-head"}
    assert codes(pr(state="closed")) == {"closed"}
    assert codes(pr(merged=True, state="closed")) == {"merged"}
