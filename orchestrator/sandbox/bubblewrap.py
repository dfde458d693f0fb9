"""The sandbox built by bubblewrap (``bwrap``, Debian ``bubblewrap``): the preferred implementation.

The same walls as the namespace implementation (``spawn.py``), from the same ``SandboxPlan``: user,
mount, pid, network, IPC (and UTS, cgroup) namespaces; a root holding the system dirs read-only, the
plan's ``ro``/``rw`` binds, fresh tmpfs at ``/tmp /var/tmp /run /dev/shm``, a minimal ``/dev``, its own
``/proc``, the plan's ``hide`` paths under empty tmpfs; no capabilities; ``no_new_privs``; and this
package's seccomp filter, handed to ``bwrap --seccomp`` as the compiled program (``seccomp.program``).

The launcher (this process, the pid the caller records) stays the sandbox's parent, so that:

- its rlimits and cgroup (``cgroups.py``) are the command's, and it dies with ``parent_pid``;
- ``--die-with-parent`` ties the sandbox to it: a ``kill -9`` of the launcher takes everything down
  (bwrap's init is pid 1 of the pid namespace; the kernel kills the rest with it);
- a failure to build the sandbox is told apart from the command's own exit status: bwrap reports the
  command's exit in ``--json-status-fd`` only when the command ran; otherwise the launcher exits
  ``SETUP_FAILED`` with bwrap's own reason in its one ``kswarm sandbox:`` line (bwrap's stderr is a
  pipe until the command starts: a trampoline ``sh`` gives the command the real stderr back).

As root the launcher first drops to the plan's ``run_as`` uid (never root inside), so bwrap always runs
unprivileged and makes a user namespace mapping only that uid. Where bwrap cannot build a sandbox
differently from the namespace implementation: ``lo`` is always up in the empty network namespace
(``loopback: false`` cannot be honoured; nothing else is in that namespace to talk to), and ``/sys`` is
absent unless the plan binds devices (accelerator runtimes read it; then the host's, read-only).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

from orchestrator.sandbox import cgroups, seccomp
from orchestrator.sandbox.mounts import PR_SET_DUMPABLE, Mounter, SandboxError, under
from orchestrator.sandbox.plan import PRIVATE_TMPFS, SETUP_FAILED, SYSTEM_RO, SandboxPlan
from orchestrator.sandbox.process import (
    FORWARDED,
    become,
    children,
    kernel_at_least,
    limit_processes,
    set_rlimits,
)

# The trampoline: fd 3 is the launcher's real stderr; bwrap's own stderr (a pipe) is dropped. In the
# sandbox's own user namespace RLIMIT_NPROC counts that sandbox alone (Linux >= 5.14): set it there
# (bash spells it -u, dash -p); a limit that cannot be set ends the sandbox before the command runs.
TRAMPOLINE = 'exec 2>&3 3>&-; exec "$0" "$@"'
NPROC_TRAMPOLINE = (
    "exec 2>&3 3>&-; { ulimit -u {n} 2>/dev/null || ulimit -p {n}; } || "
    '{ echo \'kswarm sandbox: cannot set the process limit\' >&2; exit 121; }; exec "$0" "$@"'
)
SH = "/bin/sh"
SECCOMP_FD, STATUS_FD = 10, 11


def bwrap_path() -> str | None:
    return shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin")


def bwrap_version() -> str:
    path = bwrap_path()
    if path is None:
        return "not installed"
    done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    return done.stdout.strip().removeprefix("bubblewrap ") or "unknown version"


def _size(text: str) -> int:
    """``256m`` -> bytes (the plan's tmpfs size)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    unit = units.get(text[-1:].lower())
    return int(text[:-1]) * unit if unit else int(text)


def bwrap_args(plan: SandboxPlan, seccomp_fd: int, status_fd: int) -> list[str]:
    """bwrap's command line for ``plan`` (the order of mounts matters: shallow first, as in root.py)."""
    args = ["--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
    args += ["--unshare-cgroup-try", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    args += ["--disable-userns", "--assert-userns-disabled"]
    bound: list[str] = []
    for path in SYSTEM_RO:
        if not os.path.lexists(path):
            continue
        real = os.path.realpath(path)
        if real != path:  # merged /usr: /bin -> usr/bin stays a link
            args += ["--symlink", os.path.relpath(real, os.path.dirname(path)), path]
        elif real not in bound:
            args += ["--ro-bind", real, real]
            bound.append(real)
    args += ["--dev", "/dev", "--proc", "/proc"]
    for device in plan.devices:
        if not under(device, "/dev") or device == "/dev":
            raise SandboxError(22, f"device {device} is not under /dev")
        if os.path.exists(device):
            args += ["--dev-bind", device, device]
    if plan.devices and os.path.isdir("/sys"):
        args += ["--ro-bind", "/sys", "/sys"]
    size = str(_size(plan.tmpfs_size))
    for tmp in PRIVATE_TMPFS:
        args += ["--perms", "1777", "--size", size, "--tmpfs", tmp]
    ops = [(p, "ro") for p in plan.ro] + [(p, "rw") for p in plan.rw] + [(p, "hide") for p in plan.hide]
    for path, kind in sorted(ops, key=lambda op: len(Path(op[0]).parts)):
        if kind == "hide":
            if any(under(path, b) and b != path for b in bound) and os.path.isdir(path):
                args += ["--size", str(1 << 20), "--tmpfs", path]
            continue
        if kind == "ro" and any(under(path, real) for real in SYSTEM_RO if os.path.realpath(real) == real):
            continue  # already visible, read-only, with its system dir
        if not os.path.exists(path):
            raise SandboxError(2, f"needed path {path} does not exist")
        args += ["--ro-bind" if kind == "ro" else "--bind", path, path]
        bound.append(path)
    args += ["--remount-ro", "/", "--chdir", plan.cwd]
    if plan.seccomp:
        args += ["--seccomp", str(seccomp_fd)]
    args += ["--json-status-fd", str(status_fd)]
    return args


def filter_bytes(machine: str | None = None) -> bytes:
    """The seccomp program as ``struct sock_filter[]`` (what ``bwrap --seccomp`` reads)."""
    return b"".join(struct.pack("=HBBI", *insn) for insn in seccomp.program(machine))


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def _statuses(raw: bytes) -> list[dict[str, int]]:
    """bwrap writes one JSON document per line (``child-pid``, later ``exit-code``)."""
    out: list[dict[str, int]] = []
    for line in raw.decode(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


class BubblewrapSandbox:
    """``Sandbox`` by bubblewrap."""

    name = "bubblewrap"

    def unavailable(self) -> str | None:
        if bwrap_path() is None:
            return "bubblewrap is not installed (apt-get install bubblewrap)"
        return None

    def describe(self) -> str:
        return f"bubblewrap {bwrap_version()}"

    def run(self, plan: SandboxPlan) -> NoReturn:
        """Be the sandbox's launcher: start bwrap around ``plan``'s command, stand for it until it ends."""
        bwrap = bwrap_path()
        if bwrap is None:
            raise SandboxError(2, "bubblewrap is not installed (apt-get install bubblewrap)")
        m = Mounter()
        if os.geteuid() == 0 and not plan.run_as:
            raise SandboxError(1, "refusing to run a sandboxed command as root: give it a uid (run_as)")
        if os.geteuid() != 0:  # after a uid drop from root: else its /proc (what `join` reads) is root's
            m.prctl(PR_SET_DUMPABLE, 1, "prctl(DUMPABLE)")
        if plan.parent_pid is not None:
            m.die_with_parent()
            if os.getppid() != plan.parent_pid:
                os._exit(SETUP_FAILED)
        set_rlimits(plan)
        group = cgroups.SandboxCgroup.create(plan)  # the launcher and all it starts, when delegated
        seccomp_read, seccomp_write = os.pipe()
        os.write(seccomp_write, filter_bytes())
        os.close(seccomp_write)
        status_read, status_write = os.pipe()
        err_read, err_write = os.pipe()
        trampoline = TRAMPOLINE
        if plan.pids is not None and kernel_at_least(5, 14):
            trampoline = NPROC_TRAMPOLINE.replace("{n}", str(int(plan.pids)))
        argv = [bwrap, *bwrap_args(plan, SECCOMP_FD, STATUS_FD), "--", SH, "-c", trampoline, *plan.argv]
        pid = os.fork()
        if pid == 0:
            try:
                os.close(status_read)
                os.close(err_read)
                # Its own process group: a signal to the launcher's group (a runtime's stop) reaches the
                # launcher, which forwards it to the command; bwrap itself would die of it at once.
                os.setpgid(0, 0)
                if os.geteuid() == 0 and plan.run_as:
                    limit_processes(plan.pids, False, plan.run_as)  # a uid of its own
                    become(plan.run_as)
                m.die_with_parent()  # after the uid change, which clears it
                # Out of the way first (a pipe may sit on 3, 10 or 11), then onto the numbers bwrap is told.
                ours = (seccomp_read, status_write, err_write, 2)
                moved = [os.dup2(fd, 100 + i) for i, fd in enumerate(ours)]
                os.dup2(moved[0], SECCOMP_FD)
                os.dup2(moved[1], STATUS_FD)
                os.dup2(moved[3], 3)  # the real stderr, for the trampoline
                os.dup2(moved[2], 2)  # bwrap's own messages: the pipe
                for fd in moved:
                    os.close(fd)
                os.execve(bwrap, argv, plan.env)
            except OSError as exc:
                os.write(err_write, f"bwrap: {exc}\n".encode())
            os._exit(SETUP_FAILED)
        for fd in (seccomp_read, status_write, err_write):
            os.close(fd)
        status_pid: list[int] = []

        def forward(signum: int, _frame: object) -> None:
            inner = children(status_pid[0]) if status_pid else []
            try:
                os.kill(inner[0] if inner else pid, signum)
            except ProcessLookupError:
                pass

        for sig in FORWARDED:
            signal.signal(sig, forward)
        first = b""  # the child-pid document, once the namespaces exist (it may come in pieces)
        while b"\n" not in first and (chunk := os.read(status_read, 65536)):
            first += chunk
        status_pid += [s["child-pid"] for s in _statuses(first) if "child-pid" in s]
        raw = first + _read_all(status_read)
        bwrap_errors = _read_all(err_read).decode(errors="replace")
        _, wait_status = os.waitpid(pid, 0)
        if group is not None:
            group.remove()
        exits = [s["exit-code"] for s in _statuses(raw) if "exit-code" in s]
        if not exits:
            reasons = [ln.removeprefix("bwrap: ") for ln in bwrap_errors.splitlines() if ln.strip()]
            why = reasons[-1] if reasons else f"bwrap exited {os.waitstatus_to_exitcode(wait_status)}"
            print(f"kswarm sandbox: bubblewrap: {why}", file=sys.stderr, flush=True)
            os._exit(SETUP_FAILED)
        os._exit(exits[-1])
