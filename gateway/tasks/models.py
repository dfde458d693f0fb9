"""Task board models and settings. The claimant of a task is always the caller's principal."""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

TASK_ID_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
TaskState = Literal["open", "claimed", "done"]


class TaskRules(BaseModel):
    """What one agent may do on the board (the swarm spec's ``tasks:``; ``KSWARM_TASKS_*`` too)."""

    model_config = ConfigDict(extra="forbid")

    max_claims_per_agent: int = Field(
        2,
        ge=0,
        description="Claims one agent may hold at once (0: no limit); a further claim is refused (429) "
        "until it finishes or releases one, so no agent can take the whole board.",
    )
    done_needs_merged_pr: bool = Field(
        True,
        description="task_done succeeds only with a merged PR of the claimant that changes "
        "kernels/<task>/ in the task's repo (an operator may always mark a task done).",
    )


class TasksSettings(BaseSettings, TaskRules):
    """Task board settings (environment prefix ``KSWARM_TASKS_``)."""

    model_config = SettingsConfigDict(env_prefix="KSWARM_TASKS_", extra="ignore")

    claim_ttl_s: float = Field(300.0, gt=0, description="Lease of a claim; it lapses unless renewed.")
    sweep_s: float = Field(5.0, gt=0, description="How often lapsed claims are looked for and announced.")
    renew_on_heartbeat: bool = Field(
        True, description="Renew the claims of agents whose heartbeat is fresh (crashed agents stop beating)."
    )
    heartbeat_fresh_s: float = Field(30.0, gt=0, description="A heartbeat younger than this counts as alive.")
    heartbeat_renew_max_s: float = Field(
        3600.0, gt=0, description="Heartbeats keep a claim at most this long after its last claim/renew."
    )
    channel: str = Field("general", description="Channel for board announcements (posted, done, expired).")
    bot: str = Field("board", description="Principal (kind gate, no token handed out) that announces.")
    leads: list[str] = Field(
        default_factory=list, description="Agents allowed to post tasks (besides operators)."
    )
    dataset_repo: str = Field("kswarm/dataset", description="org/name of the dataset repo the tasks live in.")
    sync_from_main: bool = Field(
        True,
        description="Post tasks that appear on the dataset repo's protected main (kswarm tasks add, once "
        "merged) on the board, checked every sweep.",
    )


class TaskSpec(BaseModel):
    """A task as posted by an operator or a lead agent."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=TASK_ID_PATTERN, description="Task id; for catalogue tasks the task's name.")
    title: str = Field(min_length=1, max_length=200, description="One line.")
    description: str = Field("", max_length=8000, description="What to build and how it is judged.")
    repo: str | None = Field(
        None, description="org/name of the repo the work goes to (default: dataset repo)."
    )
    labels: list[str] = Field(default_factory=list, max_length=20, description="Free-form labels.")


class BoardTask(TaskSpec):
    """A task with its current state on the board."""

    model_config = ConfigDict(extra="ignore")

    posted_by: str = Field(description="Principal that posted it.")
    created: float = Field(description="Unix time it was posted.")
    state: TaskState = Field(description="open, claimed (a live lease) or done.")
    holder: str | None = Field(None, description="Agent holding the claim (state claimed).")
    claimed_at: float | None = Field(None, description="Start of the current claim.")
    expires_at: float | None = Field(None, description="When the current lease lapses unless renewed.")
    claims: int = Field(0, description="How many times the task was claimed.")
    done_by: str | None = Field(None, description="Agent that marked it done.")
    done_at: float | None = Field(None, description="When.")
    result: str | None = Field(None, description="What the agent reported (e.g. 'PR #4').")


class DoneBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    result: str = Field("", max_length=2000, description="What came of it, e.g. 'PR #4 merged'.")


class SeedBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    repo: str | None = Field(None, description="org/name of the dataset repo (default: settings).")
    post_tasks: bool = Field(True, description="Also post every catalogue task on the board.")
    only: list[str] | None = Field(None, description="Post only these catalogue tasks.")


class RegressionFile(BaseModel):
    """``tasks/<task>/regressions/<id>.json`` on a trusted main: a ``RegressionCase`` every verification
    of the task runs (issue 27). A file that does not parse is listed with ``error`` (and no worker
    stores it), so one bad file never hides the task."""

    id: str = Field(description="The case id (the file's name without .json).")
    path: str
    blob_sha: str = Field(description="Its git blob sha: what the worker checks the stored file against.")
    size: int
    content: str | None = Field(None, description="The JSON text (left out with content=false).")
    error: str | None = Field(None, description="Why it is not a RegressionCase (then no worker runs it).")


def definition_key(task_blob: str, regressions: list[RegressionFile]) -> str:
    """What a worker caches a task dir by: task.py's blob sha alone when there is no regression case
    (the key before issue 27), else a hash over it and every usable case's id and blob sha, so a case
    merged on main gives the next job a fresh dir."""
    usable = sorted((r.id, r.blob_sha) for r in regressions if r.error is None)
    if not usable:
        return task_blob
    text = task_blob + "".join(f"\n{cid}:{blob}" for cid, blob in usable)
    return hashlib.sha1(text.encode()).hexdigest()


class TaskDefinition(BaseModel):
    """Where a job's task definition comes from, and (unless asked without) its source text."""

    task: str
    source: Literal["repo", "catalogue"] = Field(
        description="repo: tasks/<task>/task.py on the repo's protected main (a dataset branch, where only "
        "operators' reviewed PRs change tasks/); catalogue: the gateway's own catalogue (the repo does "
        "not define the task, or its main is not a trusted dataset branch)."
    )
    repo: str | None = Field(None, description="org/name it was read from (source repo).")
    branch: str | None = None
    commit: str | None = Field(None, description="The main commit it was read at (source repo).")
    path: str = Field(description="tasks/<task>/task.py")
    blob_sha: str = Field(description="The git blob sha of task.py: what workers cache it by and record.")
    size: int
    content: str | None = Field(None, description="task.py (left out with content=false).")
    regressions: list[RegressionFile] = Field(
        default_factory=list,
        description="The task's regression cases on that main commit (source repo only; none for the "
        "catalogue): confirmed counterexamples every verification of the task runs.",
    )


class AddTaskBody(BaseModel):
    """``kswarm tasks add DIR``: an operator's task definition, proposed as a PR to the dataset repo."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=TASK_ID_PATTERN, description="The task's name (its directory).")
    task_py: str = Field(min_length=1, max_length=512 * 1024, description="The text of task.py.")
    repo: str | None = Field(None, description="org/name of the dataset repo (default: settings).")
    reviewers: list[str] = Field(default_factory=list, max_length=20, description="Who reviews the PR.")
    message: str = Field("", max_length=2000, description="Commit message and PR body.")
