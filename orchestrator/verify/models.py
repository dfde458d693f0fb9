"""The verification result: a pydantic model serialised to JSON (schema in docs/verification.md)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from kswarm_contracts.counterexample import CounterexampleOutcome
from kswarm_contracts.verification import ADVISORY_FLAGS, ERROR_FLAGS, EVIDENCE_ORDER, Evidence, Flag, Verdict

# 2: seeds drawn per job (seed_base, seeds), trials made of calls (repeat, refill, blind), new flags.
SCHEMA_VERSION = 2

# The vocabulary the gateway reads these records with is shared, not restated (kswarm_contracts).
__all__ = ["ADVISORY_FLAGS", "ERROR_FLAGS", "EVIDENCE_ORDER", "Evidence", "Flag", "Verdict"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")


class StaticViolationModel(_Model):
    rule: str
    line: int
    message: str


class CallResult(_Model):
    kind: str  # "first" | "repeat" (same inputs) | "refill" (same buffers, new values) | "blind"
    order: str  # interpreter program order: "natural" | "reversed" | "shuffled"; "device" elsewhere
    monitored: bool  # False: every instrument was removed for this call (it looks like production)
    guarded: bool = True  # False: plain inputs and allocations (blind calls, some monitored ones)
    ok: bool
    flags: list[Flag] = Field(default_factory=list)
    max_abs_err: float | None = None
    detail: str | None = None
    launches: int | None = None


class TrialResult(_Model):
    index: int
    shape: dict[str, int]
    dtype: str
    seed: int
    refill_seed: int | None = None  # the values the buffers were refilled with (refill call)
    layout: dict[str, str] = Field(default_factory=dict)  # input index -> layout (layouts.py)
    ok: bool
    max_abs_err: float | None = None  # over elements where output and reference are both finite
    max_rel_err: float | None = None  # abs err / |ref| over those elements with ref != 0
    # The tolerance of the trial's dtype (|out - ref| <= atol + rtol * |ref|); an output of another dtype
    # is compared with its own. None: no tolerance is defined for the dtype.
    atol: float | None = None
    rtol: float | None = None
    flags: list[Flag] = Field(default_factory=list)
    detail: str | None = None
    launches: int | None = None  # kernel launches the child counted (advisory: the child reports it)
    # A trial on one of the task's device shapes (SHAPES) on the cpu pool: only a sample of each
    # launch's programs ran, and only the output elements they own were compared.
    device_shape: bool = False
    sampled: str | None = None  # what was sampled, e.g. "37 of 4096 programs (boundaries + random)"
    # A case drawn from the task's input domain for this run, never shown to any agent
    # (fresh_shapes.py); ``--seed-base`` replays the same draw.
    fresh: bool = False
    # The regression case this trial ran (its id; <task>/regressions/<id>.json): a confirmed
    # counterexample every verification runs (regressions.py).
    regression: str | None = None
    special: list[str] = Field(default_factory=list)  # special values planted in its inputs
    calls: list[CallResult] = Field(default_factory=list)


class ChildExit(_Model):
    returncode: int | None = None  # None: never started or killed on timeout
    signal: int | None = None  # set when the child died from a signal
    timed_out: bool = False
    completed: bool = False  # the child reported it ran every trial
    stderr_tail: str = ""


class TimingStats(_Model):
    median_ms: float
    p20_ms: float
    p80_ms: float
    mean_ms: float
    min_ms: float
    n: int


class TimingEntry(_Model):
    shape: dict[str, int]
    dtype: str
    candidate: TimingStats
    baseline: TimingStats  # eager PyTorch reference, measured by the parent
    speedup: float
    suspicious: bool


class EnvironmentInfo(_Model):
    python: str
    torch: str
    triton: str
    numpy: str | None
    triton_interpret: str | None  # TRITON_INTERPRET as given to the child
    platform: str
    device: str
    device_name: str | None = None


class Durations(_Model):
    static_s: float = 0.0
    inputs_s: float = 0.0
    reference_s: float = 0.0
    child_s: float = 0.0
    compare_s: float = 0.0
    timing_s: float = 0.0
    total_s: float = 0.0


class VerificationResult(_Model):
    schema_version: int = SCHEMA_VERSION
    task: str
    entry: str
    candidate: str
    candidate_sha256: str
    pool: str
    seed_base: int | None = None  # None when explicit seeds were given
    seeds: list[int] = Field(default_factory=list)  # what --seeds replays
    verdict: Verdict
    evidence: Evidence = "none"  # what the verdict proves (EVIDENCE_ORDER); set with the verdict
    reasons: list[str] = Field(default_factory=list)  # short human-readable explanation
    flags: list[Flag] = Field(default_factory=list)  # union over trials plus child-level flags
    static_violations: list[StaticViolationModel] = Field(default_factory=list)
    unverifiable_reasons: list[str] = Field(default_factory=list)
    needs_review: bool = False  # e.g. a suspicious speedup; does not change the verdict
    trials: list[TrialResult] = Field(default_factory=list)
    child: ChildExit | None = None
    timings: list[TimingEntry] | None = None
    environment: EnvironmentInfo | None = None
    durations: Durations = Field(default_factory=Durations)
    # Regression case files of the task not run, each with why (unparsable, outside the domain, too
    # large for this pool, a dtype this pool cannot verify).
    regressions_skipped: list[str] = Field(default_factory=list)
    # A counterexample run (--counterexample-input/--counterexample-generator): what the harness found.
    # Such a run judges the kernel on the counterexample's input(s) only; its verdict is the kernel's.
    counterexample: CounterexampleOutcome | None = None
