"""Dropping a job to ``nobody`` when what it must run lives behind a directory nobody may enter.

A typical case: the interpreter under ``/root/.pyenv`` (``/root`` is mode 700). Exec still works
(setpriv resolves the path before it loses its capabilities), but the interpreter then cannot find
its own library and a harness cannot start its child. Inside the job's private mount namespace, as
root and before the uid drop, ``mount_script`` covers each such blocking directory with an empty tmpfs
and binds back only the paths the job needs (each at its own path). Everything else under it stays
hidden, and nothing changes on the host (the namespace's mounts are private and die with it).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterable
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[3]


def needed_paths(extra: Iterable[Path] = ()) -> list[Path]:
    """What a job reads: the Python prefixes, the interpreter's directory, the project, ``extra``."""
    paths = {Path(sys.base_prefix), Path(sys.prefix), Path(sys.executable).resolve().parent, PROJECT_ROOT}
    paths.update(extra)
    return sorted({p.resolve() for p in paths if p.exists()})


def _blocked_ancestor(path: Path) -> Path | None:
    """The topmost proper ancestor of ``path`` that others may not traverse, if any."""
    for ancestor in reversed(path.parents):
        if ancestor == Path("/"):
            continue
        try:
            if not ancestor.stat().st_mode & 0o001:
                return ancestor
        except OSError:
            return None
    return None


def hide_plan(paths: Iterable[Path]) -> dict[Path, list[Path]]:
    """Blocking directory -> the needed paths under it (empty when every path is reachable)."""
    plan: dict[Path, list[Path]] = {}
    for path in paths:
        blocked = _blocked_ancestor(path)
        if blocked is not None:
            plan.setdefault(blocked, []).append(path)
    for blocked, under in plan.items():  # a needed path inside another needed path is bound with it
        plan[blocked] = [
            p for p in sorted(set(under)) if not any(p != q and p.is_relative_to(q) for q in under)
        ]
    return plan


def mount_script(plan: dict[Path, list[Path]], staging: str) -> str:
    """Shell lines (run as root in a private mount namespace) that apply ``plan``.

    ``staging`` is a shell word naming an empty root-only directory outside every covered one
    (a quoted path, or e.g. ``"$KSWARM_STAGE"``)."""
    lines = ["set -e"]
    staged: list[tuple[str, Path]] = []
    for blocked, under in sorted(plan.items()):
        for path in under:
            slot = f"{staging}/{len(staged)}"
            lines.append(f"mkdir -p {slot}")
            lines.append(f"mount --bind {shlex.quote(str(path))} {slot}")
            staged.append((slot, path))
        lines.append(f"mount -t tmpfs -o mode=0755,size=1m kswarm-hidden {shlex.quote(str(blocked))}")
    for slot, path in staged:
        lines.append(f"mkdir -p {shlex.quote(str(path))}")
        lines.append(f"mount --move {slot} {shlex.quote(str(path))}")
    lines.append("set +e")
    return "\n".join(lines)
