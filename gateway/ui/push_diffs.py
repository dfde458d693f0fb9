"""The diff of each push on a PR's page (``gateway/ui/pr_routes.py``), through the Forge protocol and
bounded: files are read only within the per-file cap, and a page's push diffs share one byte budget.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from gateway.errors import GatewayError
from gateway.forge.models import DIFF_MAX_BYTES, DIFF_MAX_FILE_BYTES, RepoFile
from gateway.forge.settings import ForgeSettings
from gateway.git.diffcut import cut_line, too_large_line

MAX_FILES = 60  # files per push diff


def two_dot_diff(old_path: str, old: str | None, new: str | None) -> str:
    a = (old or "").splitlines(keepends=True)
    b = (new or "").splitlines(keepends=True)
    head = f"diff --git a/{old_path} b/{old_path}\n"
    if old is None:
        head += "new file mode 100644\n"
    elif new is None:
        head += "deleted file mode 100644\n"
    lines = difflib.unified_diff(
        a,
        b,
        fromfile="/dev/null" if old is None else f"a/{old_path}",
        tofile="/dev/null" if new is None else f"b/{old_path}",
        lineterm="\n",
    )
    body = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    return head + body if body else ""


@dataclass
class DiffBudget:
    """The diff bytes one page may still render (``ForgeSettings.diff_max_bytes`` for all its push
    diffs together) and the per-file cap; a file is read only when it fits the latter."""

    left: int
    max_file_bytes: int

    @classmethod
    def of(cls, settings: ForgeSettings | None) -> DiffBudget:
        if settings is None:
            return cls(DIFF_MAX_BYTES, DIFF_MAX_FILE_BYTES)
        return cls(settings.diff_max_bytes, settings.diff_max_file_bytes)


def too_large(path: str, size: int, limit: int) -> str:
    return f"diff --git a/{path} b/{path}\n" + too_large_line(size, limit)


async def push_diff(
    forge: Any, org: str, repo: str, old: str, new: str, budget: DiffBudget, base: str | None = None
) -> tuple[str, str]:
    """What a push changed, from head ``old`` to head ``new``, read through the forge's protocol (the
    embedded forge and Gitea alike); ('', why) when it cannot.

    With ``base`` (the PR's base: its branch's head, or the commit a merged PR was merged onto) it is
    what the push changed *in the PR's own diff*: the files the PR changes at either head (since each
    head's merge base with ``base``) whose version differs between the heads, each as the diff between
    the two versions. Another PR merged into the base meanwhile, which a rebase or a merge of the base
    brings into the branch, is left out (the note counts those files). Without ``base`` (a commit's
    page) it is every file that differs between the two commits.

    Bounded: a file over ``budget.max_file_bytes`` is never read (a "too large" marker stands for it),
    and the text stops at ``budget.left`` with a "diff cut" marker (the budget shrinks by what it used)."""
    read_file = getattr(forge, "read_file", None)
    if read_file is None:
        return "", "this forge cannot read files at a commit"
    if budget.left <= 0:
        return "", "not shown: this page's diff budget is spent (see the PR's diff below, or git diff)"
    try:
        between = {c.path for c in await forge.compare_files(org, repo, old, new)}
        between |= {c.path for c in await forge.compare_files(org, repo, new, old)}
        changed = between
        if base:
            changed = {c.path for c in await forge.compare_files(org, repo, base, old)}
            changed |= {c.path for c in await forge.compare_files(org, repo, base, new)}
    except GatewayError as exc:
        return "", exc.message
    parts: list[str] = []
    size = 0
    limit = budget.max_file_bytes
    for path in sorted(changed)[:MAX_FILES]:
        before = await read_file(org, repo, old, path, max_bytes=limit)
        after = await read_file(org, repo, new, path, max_bytes=limit)
        if (before.sha if before else None) == (after.sha if after else None):
            continue
        big = max(before.size if before else 0, after.size if after else 0) > limit
        part = "" if big else two_dot_diff(path, _text(before), _text(after))
        if big or len(part.encode()) > limit:
            part = too_large(path, (before.size if before else 0) + (after.size if after else 0), limit)
        if size + len(part.encode()) > budget.left:
            parts.append(cut_line(size, f"see the rest with: git diff {old[:12]} {new[:12]}"))
            break
        parts.append(part)
        size += len(part.encode())
    budget.left -= size
    notes = [f"{len(changed) - MAX_FILES} more file(s) not shown"] if len(changed) > MAX_FILES else []
    from_base = len(between - changed)
    if from_base:
        notes.append(f"{from_base} file(s) that came with the base branch (other merged work) are left out")
    if base and not parts:
        notes.insert(0, "the PR's own changes are the same at both heads (a rebase or a merge of the base)")
    return "".join(parts), "; ".join(notes)


def _text(found: RepoFile | None) -> str | None:
    return found.text() if found is not None else None
