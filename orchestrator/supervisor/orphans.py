"""The orchestrator as the reaper of its agents' orphans.

Agents run in sessions of their own, several processes deep (launcher -> bubblewrap's monitor ->
bubblewrap's pid-1 init -> the agent). bubblewrap's monitor exits as soon as its init reports the
command's exit, *before* that init is reaped, and a ``kill -9`` of a launcher orphans the tree below it:
those processes are handed to the host's pid 1, which in a container or a micro-VM may reap late or
never, so an exited agent could stay listed under its uid (a zombie still owns its uid in ``/proc``)
after ``kswarm down``. The orchestrator process therefore makes itself the child subreaper of
everything it starts (``PR_SET_CHILD_SUBREAPER``): the orphans come to it, and ``reap_orphans`` collects
the exit status of every zombie child that nobody here waits for.

Only zombies in a session other than ours are reaped: processes this process started and waits for
itself through ``subprocess`` (an ``exec``, a probe) share our session, and the children that run in
sessions of their own (agent launchers, job workers) are passed in ``keep`` by whoever waits for them,
so no ``Popen`` loses its exit status.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process the reaper of its descendants' orphans (False: the kernel refused)."""
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()  # state, ppid, pgrp, session, ...


def is_zombie(pid: int) -> bool:
    """Has ``pid`` exited, only its exit status left for its parent to collect?"""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] in ("Z", "X")


def own_children() -> list[int]:
    """This process's children, from every thread's list (a child belongs to the thread that forked it;
    an adopted orphan, to the main thread)."""
    kids: list[int] = []
    for task in Path("/proc/self/task").iterdir():
        try:
            kids += [int(pid) for pid in (task / "children").read_text().split()]
        except OSError:
            continue
    return kids


def adopted_children(keep: Iterable[int] = ()) -> dict[int, bool]:
    """Children in another session than ours and not in ``keep`` (pid -> is it a zombie)."""
    kept = set(keep)
    ours = os.getsid(0)
    found: dict[int, bool] = {}
    for pid in own_children():
        fields = _stat_fields(pid)
        if pid not in kept and fields is not None and int(fields[3]) != ours:
            found[pid] = fields[0] in ("Z", "X")
    return found


def reap_orphans(keep: Iterable[int] = ()) -> list[int]:
    """Collect every zombie child in another session than ours and not in ``keep``; the pids reaped."""
    reaped: list[int] = []
    for pid, zombie in adopted_children(keep).items():
        if not zombie:
            continue
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                reaped.append(pid)
        except ChildProcessError:  # collected meanwhile by its own waiter
            continue
    return reaped


def reap_until_settled(keep: Callable[[], Iterable[int]], settle_s: float) -> list[int]:
    """Reap, for at most ``settle_s``, until no adopted child is left: after a stop, the inits below
    the killed launchers die a moment after them (their parent-death signal)."""
    deadline = time.monotonic() + settle_s
    reaped = reap_orphans(keep())
    while adopted_children(keep()) and time.monotonic() < deadline:
        time.sleep(0.05)
        reaped += reap_orphans(keep())
    return reaped
