"""Where a candidate kernel lives in a repo, and so which task it is: ``kernels/<task>/<file>.py`` (the
directory names the task). A job request is checked against it on both sides of the wire, and the
review gate classifies a PR's files by it (``gateway/forge/gate/kernels.py``)."""

from __future__ import annotations

import re

KERNELS_DIR = "kernels"
TASK_PATTERN = r"[a-z0-9][a-z0-9_.-]{0,63}"
FILE_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\.py"
CANDIDATE_RE = re.compile(rf"^{KERNELS_DIR}/(?P<task>{TASK_PATTERN})/(?P<file>{FILE_PATTERN})$")


def candidate_of(path: str) -> tuple[str, str] | None:
    """(task, file) when ``path`` is a candidate kernel, else None."""
    found = CANDIDATE_RE.match(path)
    return (found.group("task"), found.group("file")) if found else None


def task_of_kernel(path: str) -> str:
    """The task a kernel path names; ValueError with the expected layout otherwise."""
    found = candidate_of(path)
    if found is None:
        raise ValueError(
            f"bad kernel path {path!r}: a candidate is kernels/<task>/<file>.py (the directory is its task)"
        )
    return found[0]
