"""Path confinement for the file and memory tools.

A path is taken relative to its root (the work dir or the memory dir); ``..`` components are refused
outright, and what is left is resolved with every symlink followed (``Path.resolve``) and must still
lie inside the resolved root. So ``../x``, ``/etc/passwd`` and a symlink that points out of the work
dir are all refused with an error that says why. ``bash`` is not path-checked: it runs with the work
dir as cwd, and its confinement is the agent's process or container isolation (see docs/agents.md).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath


class PathRefused(ValueError):
    """A path outside the dir a tool may touch."""


def confine(raw: str, root: Path, what: str = "work dir") -> Path:
    """``raw`` (relative to ``root``, or absolute inside it) as a resolved path inside ``root``."""
    if not isinstance(raw, str) or not raw.strip():
        raise PathRefused("refused: empty path")
    if "\0" in raw:
        raise PathRefused("refused: NUL byte in path")
    pure = PurePosixPath(raw)
    if ".." in pure.parts:
        raise PathRefused(f"refused: {raw!r} contains '..'; paths must stay inside the {what}")
    base = root.resolve()
    candidate = Path(pure) if pure.is_absolute() else base / pure
    resolved = candidate.resolve()
    if resolved != base and not resolved.is_relative_to(base):
        reason = "points outside" if candidate.is_relative_to(base) else "is outside"
        raise PathRefused(f"refused: {raw!r} {reason} the {what} ({base}); resolved to {resolved}")
    return resolved


def relative(path: Path, root: Path) -> str:
    base = root.resolve()
    return "." if path == base else str(path.relative_to(base))
