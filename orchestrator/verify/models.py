"""The verification result: a pydantic model serialised to JSON (schema in docs/verification.md)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# 2: seeds drawn per job (seed_base, seeds), trials made of calls (repeat, refill, blind), new flags.
SCHEMA_VERSION = 2

Verdict = Literal["pass", "fail", "error", "unverifiable"]

# What a verdict proves, strongest first:
# - device-verified: a cuda/npu pool ran every trial on real hardware and passed;
# - cpu-screened: the interpreter passed, with everything Triton leaves unspecified explored and the
#   task's device shapes sampled;
# - cpu-shapes-only: the interpreter passed on the small CPU shapes only (device shapes not run);
# - unverifiable-on-cpu: part of the kernel cannot be explored faithfully here (reasons say which);
# - none: the verdict is fail or error; it proves the kernel wrong (or the run broken), not right.
Evidence = Literal["device-verified", "cpu-screened", "cpu-shapes-only", "unverifiable-on-cpu", "none"]
EVIDENCE_ORDER: tuple[str, ...] = (
    "none",
    "unverifiable-on-cpu",
    "cpu-shapes-only",
    "cpu-screened",
    "device-verified",
)


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
    OUT_OF_BOUNDS_WRITE = "out_of_bounds_write"  # a store outside every argument, or a guard band hit
    OUT_OF_BOUNDS_READ = "out_of_bounds_read"  # a load outside every argument (interpreter)
    NO_TRITON_LAUNCH = "no_triton_launch"  # the child saw no kernel launch during the call
    TORCH_COMPUTE = "torch_compute"  # the candidate's code issued aten compute ops (launch window included)
    HOST_COMPUTE = "host_compute"  # host reads invisible to an op trace: numpy, tolist, data_ptr, ctypes
    MONITOR_TAMPERED = "monitor_tampered"  # the monitor was switched off, side-stepped, patched or probed
    FORBIDDEN_RUNTIME_CALL = "forbidden_runtime_call"  # files, processes, network, dynamic code at runtime
    OUTPUT_CONTRACT = "output_contract"  # not dense/contiguous, offset, slice of a larger buffer, a view
    OUTPUT_REUSED = "output_reused"  # an output shares storage with an earlier call's output
    STALE_OUTPUT = "stale_output"  # after an in-place refill the output still answers the old inputs
    PROGRAM_ORDER_DEPENDENT = "program_order_dependent"  # result depends on the order programs run in
    MONITOR_DEPENDENT = "monitor_dependent"  # wrong only in the blind (unmonitored) calls
    # What Triton leaves unspecified, explored like the weakest device the language allows.
    INPUT_WRITTEN = "input_written"  # a store into an input's storage while the candidate ran
    FALSE_HINT = "false_hint"  # multiple_of / max_contiguous / max_constancy / assume untrue on the data
    NON_ASSOCIATIVE_COMBINE = "non_associative_combine"  # a scan/reduce combine that needs one order
    TIE_DEPENDENT = "tie_dependent"  # right only when ties resolve the interpreter's way
    DEVICE_CONDITIONED = "device_conditioned"  # host code that branches on the device it runs on
    DEVICE_SHAPES = "device_shapes"  # wrong on the task's device shapes (sampled programs)
    SUSPICIOUS_SPEEDUP = "suspicious_speedup"  # > 10x over eager: human review, not a failure


ERROR_FLAGS = frozenset({Flag.CRASH, Flag.TIMEOUT})
ADVISORY_FLAGS = frozenset({Flag.SUSPICIOUS_SPEEDUP})


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
    flags: list[Flag] = Field(default_factory=list)
    detail: str | None = None
    launches: int | None = None  # kernel launches the child counted (advisory: the child reports it)
    # A trial on one of the task's device shapes (SHAPES) on the cpu pool: only a sample of each
    # launch's programs ran, and only the output elements they own were compared.
    device_shape: bool = False
    sampled: str | None = None  # what was sampled, e.g. "37 of 4096 programs (boundaries + random)"
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
