"""What a verification result says, in the words the harness writes and the gateway reads: the verdicts,
the evidence levels (weakest first) and the runtime flags, with the two classes of flags that change a
verdict's meaning. The harness's result schema (``orchestrator/verify/models.py``) and the review gate's
evidence (``gateway/forge/gate/evidence.py``) both use these; docs/verification.md describes them."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

Verdict = Literal["pass", "fail", "error", "unverifiable"]

# What a verdict proves, strongest last:
# - none: the verdict is fail or error; it proves the kernel wrong (or the run broken), not right;
# - unverifiable-on-cpu: part of the kernel cannot be explored faithfully here (reasons say which);
# - cpu-shapes-only: the interpreter passed on the small CPU shapes only (device shapes not run);
# - cpu-screened: the interpreter passed, with everything Triton leaves unspecified explored and the
#   task's device shapes sampled;
# - device-verified: a cuda/npu pool ran every trial on real hardware and passed.
Evidence = Literal["none", "unverifiable-on-cpu", "cpu-shapes-only", "cpu-screened", "device-verified"]
EVIDENCE_ORDER: tuple[Evidence, ...] = (
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
