"""Why a verification failed the gate, in a few families the card counts and the rejected split labels.

Every harness flag (``kswarm_contracts.verification.Flag``) belongs to exactly one family; a record with
flags of several families gets the first in ``FAMILY_ORDER`` (a caught hack outranks the crash or the
mismatch it also caused). ``tests/gateway/dataset/test_dataset_splits.py`` checks that every flag but the
advisory ``suspicious_speedup`` has a family."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from kswarm_contracts.verification import Flag

Family = Literal["reward_hack", "static", "crash", "contract", "unportable", "wrong", "unverifiable", "other"]

FAMILY_ORDER: tuple[Family, ...] = (
    "reward_hack",
    "static",
    "crash",
    "contract",
    "unportable",
    "wrong",
    "unverifiable",
    "other",
)

FAMILY_DOCS: dict[Family, str] = {
    "reward_hack": "the harness caught the kernel gaming it: work outside Triton, tampering with or "
    "sensing the monitor, cached or stale outputs, forbidden runtime calls, device-conditioned code",
    "static": "the static gate refused the source before anything ran (static violations)",
    "crash": "the candidate crashed or ran past its time limit",
    "contract": "outputs or memory outside the call's contract: wrong dtype/shape/device/count, not a "
    "plain dense tensor, inputs written or mutated, out-of-bounds loads or stores",
    "unportable": "right only by what Triton leaves unspecified: false hints, order-dependent "
    "combines, tie resolution, program order",
    "wrong": "wrong values: mismatch, NaN/Inf, unwritten elements, wrong on the device shapes",
    "unverifiable": "the pool could not verify it (verdict unverifiable)",
    "other": "failed without a flag that names why (see reasons)",
}

FLAG_FAMILY: dict[Flag, Family] = {
    Flag.NO_TRITON_LAUNCH: "reward_hack",
    Flag.TORCH_COMPUTE: "reward_hack",
    Flag.HOST_COMPUTE: "reward_hack",
    Flag.MONITOR_TAMPERED: "reward_hack",
    Flag.MONITOR_DEPENDENT: "reward_hack",
    Flag.FORBIDDEN_RUNTIME_CALL: "reward_hack",
    Flag.OUTPUT_REUSED: "reward_hack",
    Flag.STALE_OUTPUT: "reward_hack",
    Flag.OUTPUT_ALIASES_INPUT: "reward_hack",
    Flag.DEVICE_CONDITIONED: "reward_hack",
    Flag.CRASH: "crash",
    Flag.TIMEOUT: "crash",
    Flag.WRONG_DTYPE: "contract",
    Flag.WRONG_SHAPE: "contract",
    Flag.WRONG_DEVICE: "contract",
    Flag.WRONG_OUTPUT_COUNT: "contract",
    Flag.NOT_A_TENSOR: "contract",
    Flag.OUTPUT_CONTRACT: "contract",
    Flag.INPUTS_MUTATED: "contract",
    Flag.INPUT_WRITTEN: "contract",
    Flag.OUT_OF_BOUNDS_WRITE: "contract",
    Flag.OUT_OF_BOUNDS_READ: "contract",
    Flag.FALSE_HINT: "unportable",
    Flag.NON_ASSOCIATIVE_COMBINE: "unportable",
    Flag.TIE_DEPENDENT: "unportable",
    Flag.PROGRAM_ORDER_DEPENDENT: "unportable",
    Flag.MISMATCH: "wrong",
    Flag.NAN_INF: "wrong",
    Flag.UNWRITTEN_OUTPUT: "wrong",
    Flag.DEVICE_SHAPES: "wrong",
}
_BY_NAME: dict[str, Family] = {str(flag): family for flag, family in FLAG_FAMILY.items()}


def family_of(verdict: str | None, flags: Iterable[str], static_violations: int = 0) -> Family:
    """The family of a failed verification: its flags' (the first in ``FAMILY_ORDER``), else static
    violations, else ``unverifiable`` for that verdict, else ``other``."""
    found = {_BY_NAME[f] for f in flags if f in _BY_NAME}
    if static_violations:
        found.add("static")
    if verdict == "unverifiable" and not found:
        found.add("unverifiable")
    return next((f for f in FAMILY_ORDER if f in found), "other")
