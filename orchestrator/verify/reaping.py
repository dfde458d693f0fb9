"""Parent-side process-tree cleanup: nothing a candidate started outlives the harness's run of it.

The zygote sweeps what a child left behind before it reports the exit (zygote.py). Two cases are left
to the parent: a zygote that was stopped (it can neither sweep nor answer) and a zygote that was killed
(its orphans are re-parented to the nearest subreaper above it). For the first, ``kill_tree`` freezes
the zygote and kills everything below it before killing it; for the second, the CLI makes itself a
child subreaper (``become_subreaper``) so those orphans become its children, and ``reap_children``
kills and reaps them before it exits. Both read the process tree from ``/proc``.
"""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_CHILD_SUBREAPER = 36
ROUNDS = 1000  # a process tree that keeps forking is killed round after round, within this bound


def _stat(pid: str) -> tuple[int, str] | None:
    """(parent pid, state letter) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    return (int(fields[1]), fields[0].decode()) if len(fields) > 1 else None


def _tree() -> dict[int, list[tuple[int, str]]]:
    """Parent pid -> [(pid, state)] for every process this one can see."""
    children: dict[int, list[tuple[int, str]]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (stat := _stat(name)) is not None:
            children.setdefault(stat[0], []).append((int(name), stat[1]))
    return children


def descendants(root: int) -> list[int]:
    """Every live (not zombie) process below ``root``."""
    tree, out, todo = _tree(), [], [root]
    while todo:
        for pid, state in tree.get(todo.pop(), []):
            todo.append(pid)
            if state != "Z":
                out.append(pid)
    return out


def _kill(pid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(root: int) -> None:
    """Kill ``root`` and every process below it. ``root`` is stopped first, so that it forks nothing
    more and reaps nothing (its dead children stay visible below it); a subreaper ``root`` keeps
    adopting the orphans of what is killed, so the rounds find them too."""
    _kill(root, signal.SIGSTOP)
    for _ in range(ROUNDS):
        left = descendants(root)
        if not left:
            break
        for pid in left:
            _kill(pid)
    _kill(root)


def become_subreaper() -> bool:
    """Make this process a child subreaper: orphans of its process tree become its children."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def reap_children() -> None:
    """Kill and reap every child this process still has (and whatever they started)."""
    me = os.getpid()
    for _ in range(ROUNDS):
        left = [pid for pid, _state in _tree().get(me, [])]
        if not left:
            return
        for pid in left:
            kill_tree(pid)
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
