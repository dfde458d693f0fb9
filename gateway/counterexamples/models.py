"""A counterexample as submitted (``CounterexampleRequest``) and as recorded (``Counterexample``).

The finder is the principal behind the token, never a field. Exactly one of ``input`` and
``generator`` is given; the gateway checks shapes and sizes and never runs a generator (the harness
does, sandboxed, in the confirming job)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kswarm_contracts.counterexample import (
    GENERATOR_MAX_BYTES,
    CounterexampleInput,
    CounterexampleOutcome,
    CounterexampleStatus,
)


class CounterexampleRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str = Field(description="The task whose kernel it breaks.")
    repo: str = Field(description="The dataset repo (org/name) the kernel is in.")
    kernel: str = Field(description="The kernel's path, e.g. kernels/softmax/k.py.")
    sha: str = Field(description="The commit the kernel is at (a merged head, or an open PR's head).")
    input: CounterexampleInput | None = Field(None, description="One input that breaks it.")
    generator: str | None = Field(
        None,
        max_length=GENERATOR_MAX_BYTES,
        description="Python source defining generate(domain, seed) -> list of inputs; run sandboxed.",
    )
    note: str = Field("", max_length=2_000, description="Why you think it breaks (shown to reviewers).")

    @model_validator(mode="after")
    def one_of_input_or_generator(self) -> CounterexampleRequest:
        if (self.input is None) == (self.generator is None):
            raise ValueError("give exactly one of input and generator")
        return self


class Counterexample(BaseModel):
    """The record: ``GET /api/counterexamples`` lists these; the card counts them."""

    model_config = ConfigDict(extra="forbid")

    id: str
    finder: str
    task: str
    repo: str
    kernel: str
    sha: str
    input: CounterexampleInput | None = None  # as submitted; confirmed: the input the harness judged
    generator_sha256: str | None = None
    note: str = ""
    status: CounterexampleStatus = "pending"
    reasons: list[str] = Field(default_factory=list)
    outcome: CounterexampleOutcome | None = None
    job: str | None = None  # the confirming job
    regression_pr: int | None = None  # the PR adding tasks/<task>/regressions/<id>.json
    regression_merged: bool = False
    withdrew: list[str] = Field(default_factory=list)  # record ids of kernels it withdrew
    created_at: float
    decided_at: float | None = None
