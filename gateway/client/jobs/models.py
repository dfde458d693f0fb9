"""Jobs: what an agent asks for (``JobRequest``), what is stored and shown (``Job``), and the worker's wire.

A job's identity fields (submitter, repo, sha, task, kernel, pool, resources, kind) are fixed at
submission; only the state fields change afterwards, and only through the queue's scripts. The submitter
is always the principal behind the token, never a request field.
"""

from __future__ import annotations

import re
import secrets
import time
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.client.jobs.kernel_paths import task_of_kernel
from kswarm_contracts.counterexample import (
    COUNTEREXAMPLE_ID_RE,
    GENERATOR_MAX_BYTES,
    CounterexampleInput,
)
from kswarm_contracts.verification import Evidence as EvidenceLevel

SHA_RE = re.compile(r"^[0-9a-f]{40}$")
TASK_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}/[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
JOB_ID_RE = re.compile(r"^j[0-9a-f]{12,24}$")


class JobState(StrEnum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    error = "error"
    timeout = "timeout"
    cancelled = "cancelled"


TERMINAL_STATES = frozenset(
    {JobState.succeeded, JobState.failed, JobState.error, JobState.timeout, JobState.cancelled}
)
# The final state a verdict of the harness maps to. "unverifiable" is not a pass: the job failed to
# prove anything, and the commit status it sets is never "success".
VERDICT_STATES: dict[str, JobState] = {
    "pass": JobState.succeeded,
    "fail": JobState.failed,
    "unverifiable": JobState.failed,
    "error": JobState.error,
}
# Commit status per final state (Gitea's states); only a passing verdict is "success".
STATUS_OF_STATE: dict[JobState, str] = {
    JobState.succeeded: "success",
    JobState.failed: "failure",
    JobState.error: "error",
    JobState.timeout: "error",
    JobState.cancelled: "error",
}

# What an agent may ask for; "counterexample" jobs are submitted by the gateway's counterexample
# service only (gateway/counterexamples/), for the finder, carrying ``Job.counterexample``.
SubmittableKind = Literal["verify", "bench"]
JobKind = Literal["verify", "bench", "counterexample"]


class CounterexampleJob(BaseModel):
    """A counterexample job's payload: the worker writes ``input`` (as ``input.json``) or ``generator``
    (as ``generator.py``) into the job's directory and passes it to the harness
    (``--counterexample-input`` / ``--counterexample-generator``)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=COUNTEREXAMPLE_ID_RE.pattern, description="The counterexample's id.")
    input: CounterexampleInput | None = Field(None, description="The input to judge.")
    generator: str | None = Field(
        None, max_length=GENERATOR_MAX_BYTES, description="A generator's source, run by the harness."
    )

    @model_validator(mode="after")
    def _one(self) -> CounterexampleJob:
        if (self.input is None) == (self.generator is None):
            raise ValueError("a counterexample job carries exactly one of input and generator")
        return self


def new_job_id() -> str:
    """Sortable by submission time: ``j`` + milliseconds in hex + 3 random bytes."""
    return f"j{int(time.time() * 1000):x}{secrets.token_hex(3)}"


def check_kernel_path(path: str) -> str:
    """A relative ``.py`` path inside the checkout (no ``..``, no absolute path, no backslash)."""
    parts = path.split("/")
    if (
        not path.endswith(".py")
        or path.startswith("/")
        or "\\" in path
        or any(p in ("", ".", "..") for p in parts)
        or len(path) > 300
    ):
        raise ValueError(
            f"bad kernel path {path!r}: a relative .py path inside the repo, e.g. kernels/add/k.py"
        )
    return path


class JobRequest(BaseModel):
    """A submission (REST body and MCP tool arguments). The submitter comes from the token; the task
    comes from the kernel's path (``kernels/<task>/<file>.py``)."""

    model_config = ConfigDict(extra="forbid")

    kernel: str = Field(
        description="Candidate module path in the repo: kernels/<task>/<file>.py; its directory is the task."
    )
    task: str | None = Field(
        None,
        description="Optional; must equal the task the kernel's path names (a file is only ever verified "
        "as its own task). The task itself comes from the pool's trusted task dir.",
    )
    ref: str = Field("main", description="Branch, tag or sha to check out; resolved to a sha at submission.")
    repo: str | None = Field(None, description="org/name in the forge; default: the forge's default repo.")
    entry: str | None = Field(None, description="Entry function (informational; the task names it).")
    pool: str = Field("cpu", description="Pool to run in (cpu, gpu-h100, npu-910c, ...).")
    devices: int | None = Field(None, ge=0, le=64, description="Devices on one node; default: the pool's.")
    nodes: int = Field(1, ge=1, le=16, description="Nodes; every pool here takes exactly 1.")
    kind: SubmittableKind = Field(
        "verify", description="verify (correctness) or bench (also timing, device pools)."
    )
    timeout_s: int | None = Field(None, ge=1, le=86_400, description="Wall-clock limit; default: the pool's.")
    reproduce_pr: int | None = Field(
        None, ge=1, description="PR number this job reproduces as a reviewer (runs with priority)."
    )

    @field_validator("task")
    @classmethod
    def _task(cls, value: str | None) -> str | None:
        if value is not None and not TASK_RE.match(value):
            raise ValueError(f"bad task id {value!r}: a-z, 0-9, '_', '.', '-' (max 64)")
        return value

    @field_validator("kernel")
    @classmethod
    def _kernel(cls, value: str) -> str:
        check_kernel_path(value)
        task_of_kernel(value)
        return value

    @field_validator("repo")
    @classmethod
    def _repo(cls, value: str | None) -> str | None:
        if value is not None and not REPO_RE.match(value):
            raise ValueError(f"bad repo {value!r}: org/name")
        return value

    @model_validator(mode="after")
    def _task_from_path(self) -> JobRequest:
        named = task_of_kernel(self.kernel)
        if self.task is not None and self.task != named:
            raise ValueError(
                f"task {self.task!r} disagrees with the kernel's path {self.kernel} (task {named!r}): "
                "a kernel is verified only as the task its directory names"
            )
        self.task = named
        return self


class Job(BaseModel):
    """A stored job: immutable identity plus the state the queue maintains."""

    id: str = Field(description="Job id (j + hex time + random).")
    submitter: str = Field(description="Principal that submitted it (from its token).")
    repo: str = Field(description="org/name in the forge.")
    ref: str = Field(description="What the submitter named (branch, tag or sha).")
    sha: str = Field(description="The commit, resolved once at submission; never changes.")
    task: str = Field(description="Task id.")
    kernel: str = Field(description="Candidate module path in the checkout.")
    entry: str | None = Field(None, description="Entry function, if named.")
    pool: str = Field(description="Pool name.")
    nodes: int = Field(1, description="Nodes (always 1).")
    devices: int = Field(description="Devices on that node (0 for cpu pools: a slot, no device).")
    kind: JobKind = Field("verify", description="verify, bench or counterexample.")
    counterexample: CounterexampleJob | None = Field(
        None, description="kind counterexample: the counterexample it judges (set by the gateway only)."
    )
    timeout_s: int = Field(description="Wall-clock limit of one attempt.")
    priority: Literal["reproduction", "normal"] = Field("normal", description="Reproductions go first.")
    reproduce_pr: int | None = Field(None, description="PR reproduced by this job, if any.")
    max_attempts: int = Field(3, description="Deliveries before the job is dead-lettered.")
    submitted: float = Field(description="Unix time of submission.")
    # -- state (changed only by the queue's scripts) --
    state: JobState = Field(JobState.queued, description="queued, running or a final state.")
    attempts: int = Field(0, description="Times a worker started it (a reclaim starts it again).")
    worker: str | None = Field(None, description="Consumer running it (principal/instance).")
    node: str | None = Field(None, description="Node it runs on.")
    allocated: list[str] = Field(default_factory=list, description="Device ids it holds while running.")
    started: float | None = Field(None, description="Start of the latest attempt.")
    finished: float | None = Field(None, description="When it reached a final state.")
    verdict: str | None = Field(None, description="The harness verdict: pass, fail, error, unverifiable.")
    error: str | None = Field(None, description="Why it did not pass, in one line.")
    exit_code: int | None = Field(None, description="Harness exit code of the final attempt.")
    cancel_requested: bool = Field(False, description="Cancellation asked while running.")
    evidence: EvidenceLevel | None = Field(
        None,
        description="What the result proves (none < unverifiable-on-cpu < cpu-shapes-only < cpu-screened < "
        "device-verified), derived by the gateway from the pool and the verdict when the job finished; "
        "never a request field. None until final.",
    )
    result: dict[str, Any] | None = Field(
        None, description="The harness's result record (docs/verification.md)."
    )
    reverify: str | None = Field(
        None,
        description="The regression case (counterexample id) this job re-verifies an accepted kernel "
        "against: the dataset healing itself (issue 27). Set only by the gateway, which submits such jobs "
        "as its gate principal; never a request field.",
    )

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def public(self, with_result: bool = True) -> dict[str, Any]:
        return self.model_dump(exclude=None if with_result else {"result"})


class TakeRequest(BaseModel):
    """A worker asks for its next job."""

    model_config = ConfigDict(extra="forbid")

    instance: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="This worker process's id.")
    node: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="Node the worker serves.")
    free_devices: int = Field(ge=0, description="Devices free on that node now.")
    free_ids: list[str] = Field(default_factory=list, description="Their ids, for the job record.")
    wait_s: float = Field(2.0, ge=0, le=20, description="Long-poll this long when nothing fits.")


class Assignment(BaseModel):
    """What ``take`` hands a worker: the job and the attempt it must quote back."""

    job: Job
    attempt: int = Field(description="Attempt number; heartbeats and finish must quote it.")
    consumer: str = Field(description="Consumer name in the pool's group (principal/instance).")


class HeartbeatRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="Worker process id.")
    attempt: int = Field(ge=1, description="Attempt being run.")
    log: str = Field("", max_length=65_536, description="New output since the last heartbeat.")


class HeartbeatReply(BaseModel):
    ok: bool = Field(description="False: this attempt is no longer yours (reclaimed or final); stop it.")
    cancel: bool = Field(False, description="The submitter cancelled the job; stop it and report cancelled.")


class FinishRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="Worker process id.")
    attempt: int = Field(ge=1, description="Attempt being finished.")
    state: JobState = Field(description="Final state.")
    verdict: str | None = Field(None, description="Harness verdict.")
    error: str | None = Field(None, max_length=4000, description="One-line reason when not succeeded.")
    exit_code: int | None = Field(None, description="Harness exit code.")
    result: dict[str, Any] | None = Field(None, description="Result record.")
    log: str = Field("", max_length=65_536, description="Output not sent by heartbeats yet.")


class WorkerToken(BaseModel):
    """A pool's worker principal and a fresh token for it (shown once; stored as a hash only)."""

    pool: str = Field(description="The pool this principal serves, and no other.")
    principal: str = Field(description="The worker principal (worker-<pool>).")
    token: str = Field(description="A new token of that principal.")


class FinishReply(BaseModel):
    recorded: bool = Field(description="True exactly once per job: the first finish of a live attempt.")
    state: JobState = Field(description="The job's state after the call.")
