"""Evidence says what it proves (issue 22 principle 6): the gate weighs each changed kernel's evidence level.

Pure tests of ``policy.evaluate`` and the levels' derivation: a cpu-shapes-only pass blocks under the
default policy with a reason that says so; a device requirement (``required_checks`` naming a device
pool, ``min_evidence: device-verified``) blocks a cpu-only PR and passes once that pool's pass is in; a
record written before levels existed reads as its pool and verdict imply; the level a worker reports
can lower what a job proves, never raise it above what the pool that ran it can prove.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from redis.asyncio import Redis

from gateway.forge import keys
from gateway.forge.gate.evidence import (
    Verification,
    derive_evidence,
    implied_evidence,
)
from gateway.forge.gate.kernels import ChangedFile, classify
from gateway.forge.gate.ledger import EvidenceLedger
from gateway.forge.gate.policy import ReviewPolicy, evaluate
from gateway.forge.models import PullRequest, Review

HEAD, BASE = "a" * 40, "b" * 40
CPU, NPU = "kswarm/verify:cpu", "kswarm/verify:npu-910c"
ADD = "kernels/add/alice_triton.py"
SCREENED_RESULT = {"evidence": "cpu-screened", "trials": [{"device_shape": True, "ok": True}]}
_ids = iter(range(1, 10_000))


def pr() -> PullRequest:
    review = Review(id=1, user="bob", state="APPROVED", commit_id=HEAD, submitted=1.0)
    return PullRequest(
        org="o", repo="r", number=1, title="add", author="alice", head="alice/add", base="main",
        head_sha=HEAD, base_sha=BASE, mergeable=True, reviews=[review],
    )  # fmt: skip


def job(evidence: str | None, pool: str = "cpu", verdict: str = "pass", **fields: object) -> Verification:
    state = {"pass": "succeeded", "fail": "failed", "unverifiable": "failed"}.get(verdict, "error")
    record: dict[str, object] = {
        "job_id": f"j{next(_ids):012x}", "repo": "o/r", "sha": HEAD, "kernel": ADD, "task": "add",
        "pool": pool, "kind": "verify", "submitter": "alice", "state": state, "verdict": verdict,
        "evidence": evidence,
    }  # fmt: skip
    return Verification.model_validate({**record, **fields})


def decide(records: list[Verification], policy: ReviewPolicy):  # type: ignore[no-untyped-def]
    changes = classify(
        [ChangedFile(path=ADD, status="added")],
        author="alice",
        dataset=False,
        trusted_paths=policy.trusted_paths,
    )
    return evaluate(pr(), policy, changes=changes, evidence=records)


def reasons(decision: object) -> dict[str, tuple[str, bool]]:
    return {r.code: (r.message, r.blocking) for r in decision.reasons}  # type: ignore[attr-defined]


def test_a_cpu_shapes_only_pass_blocks_under_the_default_policy_saying_so() -> None:
    policy = ReviewPolicy(required_checks=[CPU])
    assert policy.min_evidence == "cpu-screened", "the default minimum"
    decision = decide([job("cpu-shapes-only")], policy)
    assert not decision.mergeable
    message, blocking = reasons(decision)["kernel-evidence"]
    assert blocking and set(reasons(decision)) == {"kernel-evidence"}
    assert message.startswith(f"{ADD} at {HEAD[:10]} has cpu-shapes-only evidence")
    assert "on the small CPU shapes only" in message and "the policy requires cpu-screened" in message
    [kernel] = decision.kernels
    assert (kernel.evidence, kernel.required_evidence, kernel.evidence_ok) == (
        "cpu-shapes-only",
        "cpu-screened",
        False,
    )
    [check] = kernel.checks
    assert check.state == "insufficient" and check.summary == "pass (cpu-shapes-only); cpu-screened required"
    state, description = decision.aggregate(CPU)
    assert state == "failure" and description.startswith(
        "insufficient evidence (cpu-shapes-only; cpu-screened"
    )
    # The same pass once the cpu pool screens device shapes merges, and the statuses say so.
    decision = decide([job("cpu-screened")], policy)
    assert decision.mergeable
    assert decision.kernels[0].checks[0].summary.startswith("pass (cpu-screened): job j")
    assert decision.aggregate(CPU) == ("success", "pass (cpu-screened): all 1 changed kernel(s) verified")
    # The minimum is the policy's: a repo may accept the interpreter's small shapes.
    assert decide(
        [job("cpu-shapes-only")], ReviewPolicy(required_checks=[CPU], min_evidence="cpu-shapes-only")
    ).mergeable


def test_levels_that_prove_no_kernel_right_never_satisfy_and_cannot_be_required() -> None:
    policy = ReviewPolicy(required_checks=[CPU], min_evidence="cpu-shapes-only")
    for level in ("none", "unverifiable-on-cpu"):
        with pytest.raises(ValidationError):
            ReviewPolicy(required_checks=[CPU], min_evidence=level)  # type: ignore[arg-type]
        # A pass the job runner recorded with such a level (a worker lowered its own claim) is short.
        assert "kernel-evidence" in reasons(decide([job(level)], policy))
    with pytest.raises(ValidationError):
        ReviewPolicy(min_evidence="gpu-verified")  # type: ignore[arg-type]


def test_a_device_requirement_blocks_a_cpu_only_pr_and_passes_with_the_pools_pass() -> None:
    policy = ReviewPolicy(required_checks=[CPU, NPU], min_evidence="device-verified")
    # cpu-screened on the cpu pool, nothing on the npu pool: waiting for the npu job it names.
    decision = decide([job("cpu-screened")], policy)
    assert not decision.mergeable and set(reasons(decision)) == {"kernel-unverified"}
    message, blocking = reasons(decision)["kernel-unverified"]
    assert not blocking and f"on {NPU}" in message and 'pool="npu-910c"' in message
    assert decision.kernels[0].evidence == "cpu-screened" and not decision.kernels[0].evidence_ok
    # The npu pool's pass is in: mergeable, each status saying its own level.
    decision = decide([job("cpu-screened"), job("device-verified", pool="npu-910c")], policy)
    assert decision.mergeable and decision.kernels[0].evidence == "device-verified"
    assert decision.aggregate(NPU)[1].startswith("pass (device-verified)")
    assert decision.aggregate(CPU)[1].startswith("pass (cpu-screened)")
    # The required pools alone (default minimum): each named pool's pass is needed.
    both = ReviewPolicy(required_checks=[CPU, NPU])
    assert set(reasons(decide([job("cpu-screened")], both))) == {"kernel-unverified"}
    assert decide([job("cpu-screened"), job("device-verified", pool="npu-910c")], both).mergeable


def test_device_verified_with_only_a_cpu_check_is_a_hard_block_naming_the_fix() -> None:
    decision = decide(
        [job("cpu-screened")], ReviewPolicy(required_checks=[CPU], min_evidence="device-verified")
    )
    message, blocking = reasons(decision)["kernel-evidence"]
    assert blocking and "requires device-verified" in message and "kswarm/verify:npu-910c" in message


def test_a_record_written_before_levels_existed_reads_as_its_pool_and_verdict_imply() -> None:
    old_cpu = job(None)
    assert old_cpu.evidence is None and old_cpu.level == "cpu-shapes-only"
    assert "kernel-evidence" in reasons(decide([old_cpu], ReviewPolicy(required_checks=[CPU])))
    assert job(None, verdict="unverifiable").level == "unverifiable-on-cpu"
    assert job(None, verdict="fail").level == "none"
    assert implied_evidence("succeeded", "pass", on_device=True) == "device-verified"


async def test_the_ledger_reads_old_records_by_the_pool_that_ran_them(clean_redis: str) -> None:
    redis = Redis.from_url(clean_redis, decode_responses=True)
    try:
        ledger = EvidenceLedger(redis)
        ledger.device_pools = frozenset({"npu-910c"})  # what the job runner tells it at start-up
        old = [job(None), job(None, pool="npu-910c"), job(None, pool="retired")]
        for record in old:  # raw, as a gateway before this change wrote them (no evidence key)
            raw = record.model_dump_json(exclude={"evidence"})
            assert "evidence" not in raw
            await redis.hset(keys.verifications("o/r", HEAD), record.job_id, raw)
        await ledger.record(job("cpu-screened"))
        levels = {(r.pool, r.evidence) for r in await ledger.for_sha("o/r", HEAD)}
        assert levels == {
            ("cpu", "cpu-shapes-only"),
            ("npu-910c", "device-verified"),
            ("retired", "cpu-shapes-only"),  # a pool no longer configured fails closed
            ("cpu", "cpu-screened"),
        }
    finally:
        await redis.aclose()


@pytest.mark.parametrize(
    ("result", "on_device", "expected"),
    [
        ({"evidence": "device-verified"}, False, "cpu-shapes-only"),  # the attack: above the cpu cap
        ({**SCREENED_RESULT, "evidence": "device-verified"}, False, "cpu-shapes-only"),
        ({"evidence": "cpu-screened"}, False, "cpu-shapes-only"),  # no device-shape trial backs it
        (
            {"evidence": "cpu-screened", "trials": [{"device_shape": True, "ok": False}]},
            False,
            "cpu-shapes-only",
        ),
        (SCREENED_RESULT, False, "cpu-screened"),
        ({"evidence": "cpu-shapes-only"}, False, "cpu-shapes-only"),
        ({"evidence": "cpu-shapes-only"}, True, "cpu-shapes-only"),  # a lower claim is kept
        ({"evidence": "device-verified"}, True, "device-verified"),
        ({"evidence": "verified-by-me"}, True, "device-verified"),  # unknown: as the pass implies
        ({}, False, "cpu-shapes-only"),
        ({"evidence": "none"}, True, "device-verified"),  # the result model's default: no level
        ({"evidence": "unverifiable-on-cpu"}, False, "cpu-shapes-only"),
        (None, True, "device-verified"),
    ],
)
def test_a_reported_level_is_capped_by_the_pool_that_ran_it(
    result: dict[str, object] | None, on_device: bool, expected: str
) -> None:
    assert derive_evidence("succeeded", "pass", result, on_device) == expected


def test_only_a_pass_proves_a_kernel_right_whatever_the_record_claims() -> None:
    claim = {"evidence": "device-verified"}
    assert derive_evidence("failed", "fail", claim, True) == "none"
    assert derive_evidence("error", "error", claim, True) == "none"
    assert derive_evidence("failed", "unverifiable", claim, False) == "unverifiable-on-cpu"
    assert derive_evidence("error", "pass", claim, True) == "none", "a pass the worker could not trust"
