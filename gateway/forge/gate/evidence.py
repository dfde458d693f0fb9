"""The gate's evidence: which job verified which kernel, as which task, at which sha, with what verdict.

The job runner records one ``Verification`` per job (queued at submission, final when the gateway
records the worker's result) through ``ledger.EvidenceLedger``; nobody else writes there, and no
request field reaches it. The gate
reads a sha's records to decide, per changed kernel and required pool, whether the PR is covered
(``gateway/forge/gate/policy.py``), and publishes the per-kernel and aggregate commit statuses from them.

A verdict counts only for the exact (sha, kernel path, task, pool, kind) it was produced on; the task
is always the one the kernel's path names (``gateway/forge/gate/kernels.py``). ``outcome`` says what a job
proves: ``pass``; ``fail`` (the harness judged the kernel: fail or unverifiable — a property of the
kernel, whoever submitted the job); ``pending``; or ``none`` (error, timeout, cancellation: the job
proved nothing about the kernel, so another agent's short-timeout or cancelled job cannot flip a PR).

``evidence`` says what a job proves about the kernel, weakest first: ``none``,
``unverifiable-on-cpu``, ``cpu-shapes-only``, ``cpu-screened``, ``device-verified``. It is derived by the
gateway when the job finishes (``derive_evidence``), from the pool that ran it and the verdict, with the
harness's own level (the result record's ``evidence``) honoured only up to what that pool can prove: a
cpu pool never yields ``device-verified``, whatever a worker's record says.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from kswarm_contracts.verification import EVIDENCE_ORDER, Evidence

Outcome = Literal["pass", "fail", "pending", "none"]
PENDING_STATES = frozenset({"queued", "running"})

# The harness's levels, from the vocabulary both sides import (kswarm_contracts.verification).
EvidenceLevel = Evidence
EVIDENCE_LEVELS: tuple[EvidenceLevel, ...] = EVIDENCE_ORDER
# What each level proves, in the words pr why, the UI and the dataset card use.
EVIDENCE_MEANS: dict[str, str] = {
    "device-verified": "a device pool ran every trial on real hardware and passed",
    "cpu-screened": "the CPU interpreter passed, with the task's device shapes sampled",
    "cpu-shapes-only": "the CPU interpreter passed on the small CPU shapes only (device shapes not run)",
    "unverifiable-on-cpu": "the CPU interpreter cannot run it faithfully: verify it on a device pool",
    "none": "proves nothing about the kernel being right",
}


def evidence_rank(level: str | None) -> int:
    """Position in EVIDENCE_LEVELS; anything unknown ranks as ``none`` (fails closed)."""
    return EVIDENCE_LEVELS.index(level) if level in EVIDENCE_LEVELS else 0


def pool_cap(on_device: bool) -> EvidenceLevel:
    """The most a pool can prove: only a device pool (cuda/npu hardware, not the interpreter) proves
    ``device-verified``; the interpreter at best screens."""
    return "device-verified" if on_device else "cpu-screened"


def implied_evidence(state: str, verdict: str | None, on_device: bool) -> EvidenceLevel:
    """The level a verdict implies when no level was reported (a record written before levels existed,
    or a harness that writes none): a device pass is ``device-verified``; a cpu pass the weakest pass,
    ``cpu-shapes-only`` (nothing says the device shapes ran); a cpu ``unverifiable`` is
    ``unverifiable-on-cpu``; anything else proves nothing."""
    if state == "succeeded" and verdict == "pass":
        return "device-verified" if on_device else "cpu-shapes-only"
    if state == "failed" and verdict == "unverifiable" and not on_device:
        return "unverifiable-on-cpu"
    return "none"


def derive_evidence(
    state: str, verdict: str | None, result: Mapping[str, Any] | None, on_device: bool
) -> EvidenceLevel:
    """The level the gateway records for a finished job: computed here, never taken from a request.

    Only a pass proves something right, so a level above ``none`` needs ``succeeded`` + ``pass``. The
    harness's reported level (``result["evidence"]``) counts only if it is a known level the pool can
    prove and the record backs it: above the pool's cap (a cpu pool's record claiming
    ``device-verified``) the record is not trusted for its level at all, and ``cpu-screened`` on a cpu
    pool needs a passing device-shape trial in the record (what the harness's own ``evidence_for``
    requires). Then the level reads as the verdict implies, as it does for a pass whose record says
    ``none`` or ``unverifiable-on-cpu`` (a record made without a level: the result model's default). A
    lower pass level is kept (it only hurts the claimant)."""
    implied = implied_evidence(state, verdict, on_device)
    if implied in ("none", "unverifiable-on-cpu") or result is None:
        return implied
    reported = result.get("evidence")
    if not isinstance(reported, str) or reported not in EVIDENCE_LEVELS:
        return implied
    if evidence_rank(reported) > evidence_rank(pool_cap(on_device)):
        return implied
    if evidence_rank(reported) < evidence_rank("cpu-shapes-only"):
        return implied  # a pass "proving nothing" contradicts itself: a record made without a level
    if reported == "cpu-screened" and not on_device and not _device_shapes_passed(result):
        return implied
    return reported


def _device_shapes_passed(result: Mapping[str, Any]) -> bool:
    trials = result.get("trials")
    if not isinstance(trials, list):
        return False
    return any(isinstance(t, dict) and t.get("device_shape") is True and t.get("ok") is True for t in trials)


def check_context(kind: str, pool: str) -> str:
    """The aggregate (required) status context of a job kind on a pool: ``kswarm/verify:cpu``."""
    return f"kswarm/{kind}:{pool}"


def kernel_context(kind: str, pool: str, kernel: str) -> str:
    """The per-kernel status context: ``kswarm/verify:cpu/<task>/<file>`` for ``kernels/<task>/<file>``."""
    return f"{check_context(kind, pool)}/{kernel.removeprefix('kernels/')}"


def parse_check_context(context: str) -> tuple[str, str] | None:
    """(kind, pool) of an aggregate kswarm context, else None (an external status context)."""
    if not context.startswith("kswarm/") or "/" in context.removeprefix("kswarm/"):
        return None
    kind, sep, pool = context.removeprefix("kswarm/").partition(":")
    if not sep or kind not in ("verify", "bench") or not pool:
        return None
    return kind, pool


class Verification(BaseModel):
    """One job on one kernel at one sha."""

    job_id: str
    repo: str = Field(description="org/name.")
    sha: str
    kernel: str = Field(description="kernels/<task>/<file>.py")
    task: str = Field(description="The task its path names (the only task it can be verified as).")
    pool: str
    kind: str = Field(description="verify or bench.")
    submitter: str = Field(description="From the submitting token.")
    state: str = Field(description="The job's state: queued, running or a final state.")
    verdict: str | None = Field(None, description="The harness verdict, once final.")
    error: str | None = None
    reproduce_pr: int | None = None
    evidence: EvidenceLevel | None = Field(
        None,
        description="What the job proves, derived by the gateway when it finished (derive_evidence); "
        "None while queued or running, and on records written before levels existed (see level).",
    )
    ts: float = Field(default_factory=time.time)

    @property
    def context(self) -> str:
        return check_context(self.kind, self.pool)

    @property
    def outcome(self) -> Outcome:
        if self.state in PENDING_STATES:
            return "pending"
        if self.state == "succeeded" and self.verdict == "pass":
            return "pass"
        if self.state == "failed" and self.verdict in ("fail", "unverifiable"):
            return "fail"
        return "none"

    @property
    def level(self) -> EvidenceLevel:
        """The recorded level; a record without one reads as its verdict implies on a cpu pool (the
        ledger fills in device pools' old records, ``EvidenceLedger.for_sha``), so it fails closed."""
        if self.evidence is not None:
            return self.evidence
        return implied_evidence(self.state, self.verdict, on_device=False)

    def brief(self) -> str:
        what = self.verdict or self.state
        if self.outcome == "pass":
            what = f"pass ({self.level})"
        return f"job {self.job_id} by @{self.submitter}: {what}"


def combine(records: list[Verification]) -> Outcome:
    """One kernel's standing on one context: any real failure fails it; else any pass passes it."""
    outcomes = {r.outcome for r in records}
    for outcome in ("fail", "pass", "pending"):
        if outcome in outcomes:
            return outcome
    return "none"
