"""One sandbox for agents and jobs: user, mount, pid, network and IPC namespaces around a minimal root.

Two implementations of one ``Sandbox`` protocol (``protocol.py``) build it from the same plan:
bubblewrap (``bubblewrap.py``, preferred where installed) and this package's own ctypes calls
(``namespaces.py``, the fallback; the one that works as root without user namespaces).
``spawn.run_sandboxed`` picks one (``$KSWARM_SANDBOX``: auto, bubblewrap, namespaces); ``spawn.join``
enters a running sandbox of either. cgroup v2 limits where delegated (``cgroups.py``); what is in
effect, in lines for banners and logs (``report.py``). The text below describes what both build.

Used by the process backend's ``userns`` mode (``orchestrator.runtime.launch``) for agents and by the
local job executor (``python -m orchestrator.sandbox PLAN``) for every job. A ``SandboxPlan`` says what
the root holds; the launcher (the pid its caller records) enters fresh namespaces, forks the
namespace's init, which builds a new root on a tmpfs and ``pivot_root``\\s into it:

- read-only, recursively (every submount too): the system dirs (``/usr``, ``/bin``, ``/sbin``, ``/lib*``,
  ``/etc``) and the plan's ``ro`` paths (the project, the Python installation, ...);
- read-write: the plan's ``rw`` paths only;
- fresh: ``/tmp``, ``/var/tmp``, ``/run``, ``/dev/shm`` (tmpfs), ``/proc`` of its own pid namespace, a
  read-only ``/sys`` of its own network namespace (no cgroup mounts), a ``/dev`` with null, zero, full,
  random, urandom, tty and the plan's device nodes;
- hidden: the plan's ``hide`` paths, under an empty tmpfs, wherever a bind would show them;
- nothing else: not the old root (detached, so there is nothing underneath to unmount to).

The network namespace is empty (``lo`` only, up or down as planned). Without root the command keeps
the caller's uid inside a user namespace that maps nothing else; as root it runs as the plan's
``run_as`` uid (never as root). It has no capabilities after its ``execve``, ``no_new_privs`` and a
seccomp filter (``seccomp.py``). Init (pid 1) forwards TERM/INT/HUP, reaps orphans and exits with the
command's status; when it dies the kernel kills everything left in the pid namespace, and it dies with
the launcher (``PR_SET_PDEATHSIG``, with a pipe closing the race), so a ``kill -9`` of the launcher
takes the whole sandbox down. docs/sandbox.md has the mount tables and the tests that attack each wall.
"""

from __future__ import annotations

from orchestrator.sandbox.mounts import SandboxError
from orchestrator.sandbox.plan import SETUP_FAILED, SandboxPlan

__all__ = ["SETUP_FAILED", "SandboxError", "SandboxPlan"]
