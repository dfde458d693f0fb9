"""A counterexample, in the words the gateway takes from a red-team agent and the harness confirms
(issue 27): one input of a task (a case inside its domain, a dtype, a seed for the task's own input
builder, per-input layouts, special values), or a small generator script that prints such inputs.

The gateway validates the request's shape (this model) and never runs the generator; the harness runs
it in the candidate's sandbox, checks every input against the task's domain (``InputDomain.check``),
runs the reference and the kernel on it, and writes a ``CounterexampleOutcome`` into its result. A
confirmed input becomes a regression case of the task: ``tasks/<task>/regressions/<id>.json`` on the
dataset repo's main, a ``RegressionCase``, which every later verification of the task runs.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# Sizes the gateway accepts and the harness enforces again.
GENERATOR_MAX_BYTES = 16_000  # a generator script's source
GENERATOR_MAX_INPUTS = 16  # inputs one generator may print; the first the kernel fails on is the one
GENERATOR_TIMEOUT_S = 20.0  # the generator's own run, before any kernel runs
REGRESSIONS_DIR = "regressions"  # under tasks/<task>/ on main and in a worker's task dir
COUNTEREXAMPLE_ID_RE = re.compile(r"^cx[0-9a-f]{12,24}$")

CounterexampleStatus = Literal["pending", "confirmed", "refused", "error"]


class CounterexampleInput(BaseModel):
    """One input of a task: what its ``make_inputs(case, dtype, seed)`` builds, laid out and with the
    special values applied. Unknown keys are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    case: dict[str, int] = Field(description="The case: a value for every dimension (and any parameter).")
    dtype: str = Field(description="One of the task's dtypes, e.g. float32.")
    seed: int = Field(0, ge=0, lt=2**63, description="Seed of the task's input builder.")
    layouts: dict[int, str] = Field(
        default_factory=dict, description="Input index -> layout (dense, transposed, padded, offset, ...)."
    )
    special: list[str] = Field(
        default_factory=list, max_length=6, description="Special values to plant: zeros, nan, inf, ..."
    )


class CounterexampleOutcome(BaseModel):
    """What the harness found for a counterexample (in its result's ``counterexample``)."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["confirmed", "refused", "error"]
    reasons: list[str] = Field(default_factory=list)  # why refused (or errored); what failed, confirmed
    input: CounterexampleInput | None = None  # the input judged (a generator's first failing one)
    inputs_tried: int = 0
    kernel_flags: list[str] = Field(default_factory=list)  # the trial's flags, confirmed
    max_abs_error: float | None = None


class RegressionCase(BaseModel):
    """``tasks/<task>/regressions/<id>.json``: a confirmed counterexample, run by every verification."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=COUNTEREXAMPLE_ID_RE.pattern)
    task: str
    input: CounterexampleInput
    finder: str = Field(description="The agent that found it (credited on the card).")
    kernel: str = Field(description="The kernel path it broke when confirmed.")
    sha: str = Field(description="The commit the kernel was at.")
    job: str = Field(description="The job that confirmed it.")
