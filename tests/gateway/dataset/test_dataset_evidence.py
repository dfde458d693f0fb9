"""The dataset's ``evidence`` (issue 22 principle 6): each record carries the gateway's level, the card the
level per accepted kernel and "N device-verified, M cpu-screened". Pure functions, no gateway."""

from __future__ import annotations

from typing import Any

from gateway.dataset.build import evidence_of
from gateway.dataset.card import evidence_line, render_card, summarize
from gateway.dataset.sources import JobRecord


def record(**fields: Any) -> JobRecord:
    base = {"id": "j1", "submitter": "alice", "repo": "o/r", "sha": "a" * 40, "task": "add",
            "kernel": "kernels/add/alice.py", "pool": "cpu", "state": "succeeded",
            "verdict": "pass"}  # fmt: skip
    return JobRecord.model_validate({**base, **fields})


def test_a_record_carries_the_gateways_level_never_the_harness_records_claim() -> None:
    claim = {"verdict": "pass", "evidence": "device-verified"}
    assert evidence_of(record(evidence="cpu-screened", result=claim), "pass") == "cpu-screened"
    # An export from before levels existed: as the verdict implies on a cpu pool, whatever the record says.
    assert evidence_of(record(result=claim), "pass") == "cpu-shapes-only"
    assert evidence_of(record(state="failed", verdict="fail", result=claim), "fail") == "none"
    assert evidence_of(record(evidence="made-up"), "pass") == "cpu-shapes-only"


def row(
    task: str, path: str, commit: str, evidence: str, accepted: bool = True, **extra: Any
) -> dict[str, Any]:
    return {
        "task": task, "kernel_path": path, "commit": commit, "author": "alice", "pool": "cpu",
        "passed": evidence != "none", "accepted": accepted,
        "verdict": "pass" if evidence != "none" else "fail",
        "flags": [], "evidence": evidence, **extra,
    }  # fmt: skip


def test_the_card_shows_the_level_per_accepted_kernel_and_the_summary() -> None:
    rows = [
        row("add", "kernels/add/alice.py", "c1", "cpu-screened"),
        row("add", "kernels/add/alice.py", "c1", "device-verified", pool="npu-910c"),  # same kernel, stronger
        row("softmax", "kernels/softmax/bob.py", "c2", "cpu-screened"),
        row("relu", "kernels/relu/carol.py", "c3", "cpu-shapes-only"),
        row("relu", "kernels/relu/carol.py", "c4", "none", accepted=False),
    ]
    summary = summarize(rows, "o/r")
    evidence = summary["evidence"]
    assert [(k["kernel_path"], k["evidence"]) for k in evidence["kernels"]] == [
        ("kernels/add/alice.py", "device-verified"),
        ("kernels/relu/carol.py", "cpu-shapes-only"),
        ("kernels/softmax/bob.py", "cpu-screened"),
    ]
    assert evidence["accepted"] == {"device-verified": 1, "cpu-screened": 1, "cpu-shapes-only": 1}
    assert evidence_line(evidence) == "1 device-verified, 1 cpu-screened, 1 cpu-shapes-only"
    card = render_card(summary)
    assert (
        "evidence of the accepted kernels: **1 device-verified, 1 cpu-screened, 1 cpu-shapes-only**" in card
    )
    assert "| add | `kernels/add/alice.py` | c1 | alice | `device-verified` |" in card
    assert "| softmax | `kernels/softmax/bob.py` | c2 | alice | `cpu-screened` |" in card
    # Nothing accepted yet: the line still says how many of each.
    assert evidence_line(summarize(rows[-1:], "o/r")["evidence"]) == "0 device-verified, 0 cpu-screened"
