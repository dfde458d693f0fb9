"""The verification result: a pydantic model serialised to JSON (schema in docs/verification.md)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1

Verdict = Literal["pass", "fail", "error", "unverifiable"]


class Flag(StrEnum):
    """Runtime findings. Any flag on a trial fails it; ERROR_FLAGS make the verdict "error"."""

    CRASH = "crash"  # signal, nonzero exit, exception in the candidate, missing/unreadable output
    TIMEOUT = "timeout"  # the child ran past its limit (also flagged crash)
    MISMATCH = "mismatch"  # values outside tolerance
    NAN_INF = "nan_inf"  # NaN/Inf where the reference is finite
    UNWRITTEN_OUTPUT = "unwritten_output"  # output still holds the allocation sentinel where it is wrong
    WRONG_DTYPE = "wrong_dtype"
    WRONG_SHAPE = "wrong_shape"
    WRONG_DEVICE = "wrong_device"
    WRONG_OUTPUT_COUNT = "wrong_output_count"
    NOT_A_TENSOR = "not_a_tensor"
    INPUTS_MUTATED = "inputs_mutated"
    OUTPUT_ALIASES_INPUT = "output_aliases_input"
    OUT_OF_BOUNDS_WRITE = "out_of_bounds_write"  # a guard band around an input/output was overwritten
    NO_TRITON_LAUNCH = "no_triton_launch"  # the child saw no kernel launch during the call
    TORCH_COMPUTE = "torch_compute"  # the child saw aten compute ops outside the allow-list
    SUSPICIOUS_SPEEDUP = "suspicious_speedup"  # > 10x over eager: human review, not a failure


ERROR_FLAGS = frozenset({Flag.CRASH, Flag.TIMEOUT})
ADVISORY_FLAGS = frozenset({Flag.SUSPICIOUS_SPEEDUP})


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")


class StaticViolationModel(_Model):
    rule: str
    line: int
    message: str


class TrialResult(_Model):
    index: int
    shape: dict[str, int]
    dtype: str
    seed: int
    ok: bool
    max_abs_err: float | None = None  # over elements where output and reference are both finite
    max_rel_err: float | None = None  # abs err / |ref| over those elements with ref != 0
    flags: list[Flag] = Field(default_factory=list)
    detail: str | None = None
    launches: int | None = None  # kernel launches the child counted (advisory: the child reports it)


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
    verdict: Verdict
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
