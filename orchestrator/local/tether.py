"""``python -m orchestrator.local.tether PARENT_PID -- ARGV...``: run ARGV so that it dies with its parent.

The processes ``kswarm up`` starts for the swarm and that must not outlive it -- the orchestrator child
(the reconcile loop), and the job workers it starts -- go through this: it asks the kernel for a
SIGKILL when its parent dies (``PR_SET_PDEATHSIG``, which survives ``execve``), checks that the parent
is still the one that started it (it may have died before the request), and ``execve``s ARGV. A
``kill -9`` of ``kswarm up`` thus takes the orchestrator and the workers with it (the agents, in their
own sessions, keep running and are adopted by the next ``up``), and no process is left serving a
gateway that is gone. The death signal follows the parent *thread*: start tethered processes from a
thread that lives as long as they should (the main thread).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def tethered(parent: int, argv: list[str]) -> list[str]:
    """The argv that starts ``argv`` tethered to ``parent``."""
    return [sys.executable, "-m", "orchestrator.local.tether", str(parent), "--", *argv]


def main(args: list[str]) -> int:
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m orchestrator.local.tether PARENT_PID -- ARGV...", file=sys.stderr)
        return 2
    parent, argv = int(args[0]), args[2:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        print(f"tether: prctl: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 1
    if os.getppid() != parent:  # the parent died before the request took effect
        return 1
    os.execvp(argv[0], argv)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
