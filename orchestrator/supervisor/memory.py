"""Memory hygiene: show, snapshot, roll back and reset an agent's memory dir.

Pollution spreads through memory, so memory must be inspectable and restorable. Snapshots live in
``swarm/snapshots/<name>/<id>/`` owned by the orchestrator (mode 700): the agent cannot edit its past.
The memory dir is written by the agent, so nothing here follows its symlinks: a ``MEMORY.md`` that
points at ``/etc/shadow`` is shown as a link, never read through.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from gateway.swarm.models import MemorySummary
from orchestrator.spec import AgentSpec
from orchestrator.swarm_dir import agent_files
from orchestrator.swarm_dir.agent_files import agent_dir, real_dir
from orchestrator.swarm_dir.provision import SwarmLayout, chown_tree, files_visible, identity_banner

P = ParamSpec("P")
R = TypeVar("R")
Who = TypeVar("Who", str, AgentSpec)
Op = Callable[Concatenate[SwarmLayout, Who, P], R]


def _files_visible(op: Op[Who, P, R]) -> Op[Who, P, R]:
    """Run ``op`` with the agent's dirs at their paths: after ``kswarm down`` they are in its unmounted
    disk image (orchestrator/swarm_dir/disk.py), mounted for the time of the operation."""

    @functools.wraps(op)
    def run(layout: SwarmLayout, who: Who, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with files_visible(layout, who.name if isinstance(who, AgentSpec) else who):
            return op(layout, who, *args, **kwargs)

    return run


# What the supervisor publishes of each memory on every pass: the agent writes it, so it is bounded.
SUMMARY_MD_BYTES = 64 * 1024
SUMMARY_FILES = 500


class MemoryOpError(RuntimeError):
    """A memory operation that cannot be done (unknown agent or snapshot)."""


@dataclass(frozen=True)
class MemoryView:
    """What ``kswarm agent memory show`` prints."""

    name: str
    memory_md: str
    files: list[tuple[str, int]]  # relative path, size (-1 for a symlink)
    snapshots: list[str]


def list_files(root: Path) -> list[tuple[str, int]]:
    out = []
    for dirpath, dirs, files in os.walk(root):  # os.walk does not descend into symlinked dirs
        for name in sorted(dirs + files):
            p = Path(dirpath) / name
            st = p.lstat()
            if stat.S_ISDIR(st.st_mode) and not stat.S_ISLNK(st.st_mode):
                continue
            out.append((str(p.relative_to(root)), -1 if stat.S_ISLNK(st.st_mode) else st.st_size))
    return sorted(out)


def _open_below(root_fd: int, parts: tuple[str, ...]) -> int:
    """An fd of ``root/parts...``, every component opened with ``O_NOFOLLOW``: a dir the agent swapped for
    a link after we listed it is an error here, not a walk into the link's target."""
    fd = os.dup(root_fd)
    try:
        for part in parts:
            child = os.open(part, agent_files.DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except OSError:
        os.close(fd)
        raise
    return fd


def first_files(root_fd: int, limit: int) -> tuple[list[tuple[str, int]], bool]:
    """Like ``list_files``, but relative to a dir fd, never following a link (not even one swapped in
    while we walk), and stopping after ``limit`` entries (and saying so): a memory dir with a million
    files costs a pass no more than one with ``limit``."""
    found: list[tuple[str, int]] = []
    pending: list[tuple[str, ...]] = [()]
    seen = 0  # directories count too: a tree of empty dirs is as long to walk
    while pending:
        parts = pending.pop()
        try:
            fd = _open_below(root_fd, parts)
        except OSError:
            continue
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    seen += 1
                    if seen > limit:
                        return sorted(found), True
                    if entry.is_dir(follow_symlinks=False):
                        pending.append((*parts, entry.name))
                        continue
                    try:
                        size = -1 if entry.is_symlink() else entry.stat(follow_symlinks=False).st_size
                    except OSError:
                        continue
                    # The agent names these: bytes that are no UTF-8 would make the summary unpublishable.
                    rel = os.fsencode("/".join((*parts, entry.name))).decode("utf-8", "replace")
                    found.append((rel, size))
        finally:
            os.close(fd)
    return sorted(found), False


@_files_visible
def summary(layout: SwarmLayout, name: str) -> MemorySummary:
    """What the supervisor publishes of an agent's memory (the UI's memory page), read like ``show``."""
    try:
        snaps = snapshots(layout, name)
    except OSError:
        snaps = []
    mem = layout.agent_dir(name, "memory")
    if not os.path.lexists(mem):
        return MemorySummary(snapshots=snaps, error=f"agent {name} has no memory dir (never provisioned?)")
    if not real_dir(mem):
        return MemorySummary(snapshots=snaps, error=f"agent {name}'s memory is not a directory (a symlink?)")
    fd = os.open(mem, agent_files.DIR_FLAGS)
    try:
        text, more = agent_files.read_prefix(fd, "MEMORY.md", SUMMARY_MD_BYTES) or ("", False)
        files, truncated = first_files(fd, SUMMARY_FILES)
    finally:
        os.close(fd)
    return MemorySummary(
        memory_md=text, memory_md_truncated=more, files=files, files_truncated=truncated, snapshots=snaps
    )


def snapshots(layout: SwarmLayout, name: str) -> list[str]:
    root = layout.snapshots(name)
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.exists() else []


@_files_visible
def show(layout: SwarmLayout, name: str) -> MemoryView:
    mem = layout.agent_dir(name, "memory")
    if not mem.exists():
        raise MemoryOpError(f"agent {name} has no memory dir (never provisioned?)")
    if not real_dir(mem):
        raise MemoryOpError(f"agent {name}'s memory is not a directory (a symlink?)")
    fd = os.open(mem, agent_files.DIR_FLAGS)
    try:  # MEMORY.md as a link planted by the agent reads as empty (list_files shows the link)
        memory_md = agent_files.read_text(fd, "MEMORY.md") or ""
    finally:
        os.close(fd)
    return MemoryView(name, memory_md, list_files(mem), snapshots(layout, name))


@_files_visible
def snapshot(layout: SwarmLayout, name: str, label: str = "") -> str:
    """Copy the memory dir (links copied as links) to a new snapshot; returns its id."""
    mem = layout.agent_dir(name, "memory")
    if not mem.exists():
        raise MemoryOpError(f"agent {name} has no memory dir")
    root = layout.snapshots(name)
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)
    base = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + (f"-{label}" if label else "")
    snap_id, n = base, 1
    while (root / snap_id).exists():
        n += 1
        snap_id = f"{base}.{n}"
    if not real_dir(mem):  # a link planted in its place would make us copy its target as root
        raise MemoryOpError(f"agent {name}'s memory is not a directory (a symlink?): not snapshotted")
    shutil.copytree(mem, root / snap_id, symlinks=True)
    (root / snap_id).chmod(0o700)
    return snap_id


def _replace_memory(layout: SwarmLayout, name: str, source: Path | None) -> None:
    mem = layout.agent_dir(name, "memory")
    if not real_dir(mem):
        raise MemoryOpError(f"agent {name}'s memory is not a directory (a symlink?): left as it is")
    owner = mem.stat()
    shutil.rmtree(mem)
    if source is None:
        mem.mkdir()
    else:
        shutil.copytree(source, mem, symlinks=True)
    mem.chmod(0o700)
    if os.geteuid() == 0:
        chown_tree(mem, owner.st_uid)


@_files_visible
def rollback(layout: SwarmLayout, name: str, snap_id: str | None = None) -> str:
    """Restore a snapshot (default: the latest); the current memory is snapshotted first."""
    available = snapshots(layout, name)
    if not available:
        raise MemoryOpError(f"agent {name} has no snapshots")
    target = snap_id or available[-1]
    if target not in available:
        raise MemoryOpError(f"agent {name} has no snapshot {target!r}; have: {', '.join(available)}")
    snapshot(layout, name, "before-rollback")
    _replace_memory(layout, name, layout.snapshots(name) / target)
    return target


@_files_visible
def reset(layout: SwarmLayout, agent: AgentSpec, swarm: str) -> str:
    """Snapshot, then empty the memory dir down to the identity banner; returns the snapshot id."""
    snap_id = snapshot(layout, agent.name, "before-reset")
    _replace_memory(layout, agent.name, None)
    memory = layout.agent_dir(agent.name, "memory")
    owner = memory.stat().st_uid if os.geteuid() == 0 else None
    with agent_dir(memory.parent, "memory", uid=owner) as fd:  # just recreated by us: no link
        agent_files.write_text(fd, "MEMORY.md", identity_banner(agent, swarm), uid=owner)
    return snap_id
