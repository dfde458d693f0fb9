"""What both implementations share about the sandbox's processes: rlimits, the uid drop, waiting as
init does, and the command's own last steps (``exec_command``: its filter, its exact environment)."""

from __future__ import annotations

import os
import platform
import re
import resource
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from orchestrator.sandbox import seccomp
from orchestrator.sandbox.plan import SETUP_FAILED, SandboxPlan

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
RLIMITS = {
    "as": resource.RLIMIT_AS,
    "cpu": resource.RLIMIT_CPU,
    "nofile": resource.RLIMIT_NOFILE,
    "fsize": resource.RLIMIT_FSIZE,
}


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def exit_status(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def forward_to(target: Callable[[], int | None]) -> None:
    def forward(signum: int, _frame: object) -> None:
        pid = target()
        if pid:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    for sig in FORWARDED:
        signal.signal(sig, forward)


def wait_for(child: int, reap_others: bool) -> NoReturn:
    """Wait until ``child`` exits, reaping any orphan meanwhile (init's duty), and exit with its status."""
    while True:
        try:
            pid, status = os.waitpid(-1 if reap_others else child, 0)
        except ChildProcessError:
            os._exit(SETUP_FAILED)
        if pid == child:
            os._exit(exit_status(status))


def set_rlimits(plan: SandboxPlan) -> None:
    for name, value in plan.rlimits.items():
        resource.setrlimit(RLIMITS[name], (value, value))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def kernel_at_least(major: int, minor: int) -> bool:
    have = tuple(int(x) for x in re.findall(r"\d+", platform.release())[:2])
    return have >= (major, minor)


def limit_processes(pids: int | None, own_userns: bool, run_as: int | None) -> None:
    """RLIMIT_NPROC counts per user namespace since Linux 5.14, so in our own user namespace it limits
    this sandbox alone; with a uid of its own (root's path) it counts that uid. Otherwise (an older
    kernel, the operator's uid shared with everything else) it is left alone."""
    if pids is not None and ((own_userns and kernel_at_least(5, 14)) or run_as is not None):
        resource.setrlimit(resource.RLIMIT_NPROC, (pids, pids))


def become(uid: int) -> None:
    """Root's path, in the command's own process: drop to ``uid`` (and the same gid), no groups."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def exec_command(plan: SandboxPlan) -> NoReturn:
    for sig in FORWARDED:
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.chdir(plan.cwd)
        os.umask(0o077)
        if plan.run_as is not None and os.geteuid() == 0:
            become(plan.run_as)
        if plan.seccomp:
            seccomp.install()
        os.execve(plan.argv[0], plan.argv, plan.env)
    except OSError as exc:
        print(f"kswarm sandbox: starting {plan.argv[0]}: {exc}", file=sys.stderr, flush=True)
        os._exit(SETUP_FAILED)
