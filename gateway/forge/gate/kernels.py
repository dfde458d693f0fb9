"""What a PR changes, in the gate's terms: candidate kernels, trusted files, and everything else.

A **candidate kernel** is exactly ``kernels/<task>/<file>.py``: the directory names the task the file is
verified as, so a job's task is a function of its kernel's path and nothing else (there is no way to
verify file X "as" task Y). Every changed candidate of a PR needs its own passing verification on the
head sha (``gateway/forge/gate/policy.py``).

In a **dataset** branch (``ReviewPolicy.dataset``) some paths are the operators' alone: the task
definitions the workers load (``tasks/``), references, CI and configuration files. A PR touching
them is blocked, naming the file; so is a file under ``kernels/`` that is not a candidate (a nested
helper, a data file), a candidate that is not named after the PR's author (``<author>_<variant>.py``:
agents add and replace their own kernels, never another agent's) and the deletion of a kernel (the
dataset keeps accepted kernels; removing one is an operator's change on main). These are rules for
agents' PRs: a PR an operator opened (``kswarm tasks add`` adds a task definition that way, versioned
and reviewed) may change those paths; its kernels still need their verification.

A candidate the base changed too since the PR forked is **stale** (any branch): the merge would hold a
three-way merge of two versions, a file no job verified.
"""

from __future__ import annotations

import fnmatch

from pydantic import BaseModel, Field

from gateway.client.jobs.kernel_paths import KERNELS_DIR, candidate_of
from gateway.forge.models import ChangedFile, ChangeStatus

# Operator-only paths of a dataset branch (fnmatch patterns; ``*`` also crosses ``/``).
DEFAULT_TRUSTED_PATHS: tuple[str, ...] = (
    "tasks/*",
    "references/*",
    "reference/*",
    ".kswarm/*",
    ".gitea/*",
    ".github/*",
    ".gitlab-ci.yml",
    ".pre-commit-config.yaml",
    ".gitattributes",
    ".gitmodules",
    "*conftest.py",
    "*.toml",
    "*.cfg",
    "*.ini",
    "*.yaml",
    "*.yml",
    "*.json",
    "setup.py",
    "Makefile",
    "Dockerfile",
    "*.Dockerfile",
    "*.sh",
)


class Candidate(BaseModel):
    path: str = Field(description="kernels/<task>/<file>.py")
    task: str = Field(description="The task its directory names.")
    file: str = Field(description="Its file name.")
    status: ChangeStatus


class BlockedPath(BaseModel):
    path: str
    why: str


class PRChanges(BaseModel):
    """A PR's changed files, sorted into what needs verification and what blocks it."""

    files: list[ChangedFile] = Field(default_factory=list)
    candidates: list[Candidate] = Field(
        default_factory=list, description="Added or modified kernels: each needs verification."
    )
    blocked: list[BlockedPath] = Field(default_factory=list, description="Paths only operators change.")
    stale: list[BlockedPath] = Field(
        default_factory=list,
        description="Candidates the base also changed since the PR forked: the merge would hold a file "
        "nobody verified.",
    )


def owned_by(file: str, author: str) -> bool:
    """Whether a kernel file name is the author's: ``<author>.py`` or ``<author>_<variant>.py``."""
    stem = file.removesuffix(".py")
    return stem == author or stem.startswith(f"{author}_")


def classify(
    files: list[ChangedFile],
    *,
    author: str,
    dataset: bool,
    trusted_paths: list[str],
    base_changed: set[str] | None = None,
    base: str = "main",
    operator_author: bool = False,
) -> PRChanges:
    """Sort ``files`` into candidates and (for a dataset branch) blocked paths; a candidate that the
    base also changed since the merge base (``base_changed``) is stale: verifying the head's file
    says nothing about the three-way merge of the two versions that would land."""
    changes = PRChanges(files=sorted(files, key=lambda f: f.path))
    for changed in changes.files:
        path = changed.path
        found = candidate_of(path)
        if found is not None and changed.status != "deleted":
            task, file = found
            changes.candidates.append(Candidate(path=path, task=task, file=file, status=changed.status))
            if path in (base_changed or set()):
                stale = (
                    f"{path} also changed on {base} since this branch forked: merge {base} into the branch "
                    "(or rebase), then verify the new head"
                )
                changes.stale.append(BlockedPath(path=path, why=stale))
        if not dataset or operator_author:
            continue
        why = _blocked_reason(changed, found, author, trusted_paths)
        if why:
            changes.blocked.append(BlockedPath(path=path, why=why))
    return changes


def _blocked_reason(
    changed: ChangedFile, found: tuple[str, str] | None, author: str, trusted_paths: list[str]
) -> str | None:
    path = changed.path
    pattern = next((p for p in trusted_paths if fnmatch.fnmatchcase(path, p)), None)
    if pattern is not None and found is None:
        return f"{path} is a trusted file ({pattern}): only operators change it, on main"
    if found is None:
        if path == KERNELS_DIR or path.startswith(f"{KERNELS_DIR}/"):
            return f"{path} is not a candidate kernel: kernels/<task>/<file>.py only"
        return None
    if changed.status == "deleted":
        return f"{path} deletes a kernel: only operators remove kernels from the dataset"
    if not owned_by(found[1], author):
        return f"{path} is not @{author}'s: name your kernels kernels/<task>/{author}_<variant>.py"
    return None
