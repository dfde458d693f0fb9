"""The gate's evidence is bound to each changed kernel: pure tests of classification and evaluation.

Each case is an attack or a rule of issue "trust at the seams": a job on another file, another sha or
as another task never covers a kernel; one failing kernel fails the PR; another agent's job that proves
nothing cannot flip it; trusted paths block; a reviewer's reproduction must cover every kernel.
"""

from __future__ import annotations

from gateway.forge.gate.evidence import Verification
from gateway.forge.gate.kernels import ChangedFile, classify
from gateway.forge.gate.policy import ReviewPolicy, evaluate
from gateway.forge.models import PullRequest, Review

HEAD, BASE, OLD = "a" * 40, "b" * 40, "c" * 40
CHECK = "kswarm/verify:cpu"
POLICY = ReviewPolicy(required_approvals=1, required_checks=[CHECK], dataset=True)
SOFTMAX, ADD = "kernels/softmax/alice_triton.py", "kernels/add/alice_triton.py"
_ids = iter(range(1, 10_000))


def pr(*reviews: Review) -> PullRequest:
    return PullRequest(
        org="o", repo="r", number=1, title="softmax", author="alice", head="alice/softmax", base="main",
        head_sha=HEAD, base_sha=BASE, mergeable=True, reviews=list(reviews),
    )  # fmt: skip


def approved(user: str = "bob") -> Review:
    n = next(_ids)
    return Review(id=n, user=user, state="APPROVED", commit_id=HEAD, submitted=float(n))


def job(kernel: str, verdict: str | None = "pass", **fields: object) -> Verification:
    states = {
        "pass": "succeeded",
        "fail": "failed",
        "unverifiable": "failed",
        "error": "error",
        None: "queued",
    }
    base: dict[str, object] = dict(
        job_id=f"j{next(_ids):012x}", repo="o/r", sha=HEAD, kernel=kernel, task=kernel.split("/")[1],
        pool="cpu", kind="verify", submitter="alice", state=states[verdict], verdict=verdict,
        # What the job runner records for an honest cpu pass once the cpu pool samples device shapes
        # (the default policy's minimum); test_forge_evidence_gate.py covers the other levels.
        evidence="cpu-screened" if verdict == "pass" else None,
    )  # fmt: skip
    base.update(fields)
    return Verification.model_validate(base)


def files(*paths: str, status: str = "added") -> list[ChangedFile]:
    return [ChangedFile(path=p, status=status) for p in paths]  # type: ignore[arg-type]


def decide(
    changed: list[ChangedFile], records: list[Verification], policy: ReviewPolicy = POLICY, **kw: object
):
    changes = classify(changed, author="alice", dataset=policy.dataset, trusted_paths=policy.trusted_paths)
    return evaluate(pr(*kw.pop("reviews", (approved(),))), policy, changes=changes, evidence=records)  # type: ignore[arg-type]


def codes(decision: object) -> set[str]:
    return {r.code for r in decision.reasons}  # type: ignore[attr-defined]


def test_the_two_kernel_trick_is_blocked() -> None:
    """The reported attack: a wrong softmax and a correct add in one PR, a passing job on add only."""
    decision = decide(files(SOFTMAX, ADD), [job(ADD)])
    assert not decision.mergeable
    assert codes(decision) == {"kernel-unverified"}
    missing = [r.message for r in decision.reasons]
    assert len(missing) == 1 and missing[0].startswith(f"{SOFTMAX} on {CHECK}")
    assert decision.aggregate(CHECK) == ("pending", "1 of 2 changed kernel(s) verified")
    assert decide(files(SOFTMAX, ADD), [job(ADD), job(SOFTMAX)]).mergeable


def test_evidence_binds_to_path_sha_task_pool_and_kind() -> None:
    for wrong in (
        job(SOFTMAX, sha=OLD),  # another commit
        job(ADD),  # another file
        job(SOFTMAX, task="add"),  # the file verified "as" another task
        job(SOFTMAX, pool="gpu"),  # another pool
        job(SOFTMAX, kind="bench"),  # another kind
        job("kernels/softmax/bob_triton.py"),  # another agent's file of the same task
    ):
        decision = decide(files(SOFTMAX), [wrong])
        assert codes(decision) == {"kernel-unverified"}, wrong


def test_one_failing_kernel_fails_the_pr_whoever_ran_it() -> None:
    decision = decide(files(SOFTMAX, ADD), [job(ADD), job(SOFTMAX), job(SOFTMAX, "fail", submitter="carol")])
    assert codes(decision) == {"kernel-failed"} and all(r.blocking for r in decision.reasons)
    assert decision.aggregate(CHECK)[0] == "failure"
    unverifiable = decide(files(SOFTMAX), [job(SOFTMAX, "unverifiable")])
    assert codes(unverifiable) == {"kernel-failed"}


def test_jobs_that_prove_nothing_cannot_flip_a_pr() -> None:
    """Another agent's cancelled, timed-out or errored job on my kernel changes nothing."""
    noise = [
        job(SOFTMAX, "error", submitter="mallory"),
        job(SOFTMAX, None, state="timeout", submitter="mallory"),
        job(SOFTMAX, None, state="cancelled", submitter="mallory"),
    ]
    assert decide(files(SOFTMAX), [job(SOFTMAX), *noise]).mergeable
    assert codes(decide(files(SOFTMAX), noise)) == {"kernel-unverified"}
    assert codes(decide(files(SOFTMAX), [job(SOFTMAX, None)])) == {"kernel-pending"}


def test_a_pr_without_kernels_needs_no_verification() -> None:
    decision = decide(files("README.md", "notes/softmax.md"), [])
    assert decision.mergeable and decision.kernels == []
    assert decision.aggregate(CHECK) == ("success", "no kernels changed: nothing to verify")
    assert not decide(files("README.md"), [], reviews=()).mergeable, "approvals still apply"


def test_trusted_paths_block_with_the_file_named() -> None:
    trusted = (
        "tasks/softmax/task.py",
        "tasks/new/task.py",
        "references/softmax.py",
        ".kswarm/pools.yaml",
        ".github/workflows/ci.yml",
        "pyproject.toml",
        "kernels/conftest.py",
        "conftest.py",
    )
    for path in trusted:
        decision = decide(files(SOFTMAX, path), [job(SOFTMAX)])
        assert not decision.mergeable, path
        blocked = [r for r in decision.reasons if r.code == "trusted-path"]
        assert blocked and blocked[0].blocking and path in blocked[0].message, path
        assert [b.path for b in decision.blocked_paths] == [path]


def test_dataset_rules_for_kernel_paths() -> None:
    cases = {
        "kernels/softmax/helpers/util.py": "not a candidate kernel",
        "kernels/softmax/data.bin": "not a candidate kernel",
        "kernels/softmax.py": "not a candidate kernel",
        "kernels/softmax/bob_triton.py": "is not @alice's",
    }
    for path, why in cases.items():
        decision = decide(files(path), [job(path)])
        assert any(why in r.message for r in decision.reasons if r.code == "trusted-path"), path
    deleted = decide(files("kernels/add/bob_old.py", status="deleted"), [])
    assert any("deletes a kernel" in r.message for r in deleted.reasons)
    # a modified kernel of her own is a candidate like an added one
    assert decide(files(SOFTMAX, status="modified"), [job(SOFTMAX)]).mergeable


def test_outside_a_dataset_branch_only_verification_binds() -> None:
    policy = ReviewPolicy(required_approvals=1, required_checks=[CHECK])
    assert decide(files("tasks/softmax/task.py"), [], policy).mergeable
    assert codes(decide(files(SOFTMAX), [], policy)) == {"kernel-unverified"}


def test_reproduction_needs_the_reviewers_own_pass_on_every_kernel() -> None:
    policy = POLICY.model_copy(update={"require_reproduction": True})
    mine = [job(SOFTMAX), job(ADD)]
    two = files(SOFTMAX, ADD)
    assert codes(decide(two, mine, policy)) == {"reproduction", "approvals"}
    partial = decide(two, [*mine, job(ADD, submitter="bob")], policy)
    assert codes(partial) == {"reproduction", "approvals"} and SOFTMAX in partial.reasons[0].message
    wrong_file = [*mine, job(ADD, submitter="bob"), job("kernels/relu/alice.py", submitter="bob")]
    assert codes(decide(two, wrong_file, policy)) == {"reproduction", "approvals"}
    failed = [*mine, job(ADD, submitter="bob"), job(SOFTMAX, "error", submitter="bob")]
    assert codes(decide(two, failed, policy)) == {"reproduction", "approvals"}
    full = [*mine, job(ADD, submitter="bob"), job(SOFTMAX, submitter="bob")]
    assert decide(two, full, policy).mergeable


def test_rename_is_a_new_kernel() -> None:
    from gateway.forge.gitea.shapes import parse_changed_file

    moved = parse_changed_file({"filename": SOFTMAX, "previous_filename": "kernels/softmax/alice_v0.py",
                                "status": "renamed"})  # fmt: skip
    assert [(f.path, f.status) for f in moved] == [
        ("kernels/softmax/alice_v0.py", "deleted"),
        (SOFTMAX, "added"),
    ]


def test_a_kernel_the_base_changed_since_the_fork_is_stale() -> None:
    """Verifying the head's file says nothing about a three-way merge with another version of it."""
    changes = classify(
        files(SOFTMAX, status="modified"),
        author="alice",
        dataset=True,
        trusted_paths=POLICY.trusted_paths,
        base_changed={SOFTMAX, "README.md"},
    )
    decision = evaluate(pr(approved()), POLICY, changes=changes, evidence=[job(SOFTMAX)])
    assert codes(decision) == {"kernel-stale"} and decision.reasons[0].blocking
    assert "also changed on main since this branch forked" in decision.reasons[0].message


def test_a_compare_without_files_fails_closed() -> None:
    import pytest

    from gateway.errors import ForgeError
    from gateway.forge.gitea.shapes import parse_compare_files

    listed = {"commits": [{"sha": "a", "files": [{"filename": SOFTMAX, "status": "modified"}]}]}
    assert [(f.path, f.status) for f in parse_compare_files(listed)] == [(SOFTMAX, "modified")]
    assert parse_compare_files({"commits": [], "total_commits": 0}) == []
    with pytest.raises(ForgeError, match="cannot tell"):
        parse_compare_files({"commits": [{"sha": "a"}], "total_commits": 1})
