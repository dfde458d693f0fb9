"""The sandbox built by this package itself (ctypes: unshare, mount, pivot_root): the fallback where
bubblewrap is not installed, and the only one that can be built as root without user namespaces.

The launcher enters fresh namespaces, forks the namespace's init, which builds the root (``root.py``)
and starts the command (``process.exec_command``)."""

from __future__ import annotations

import fcntl
import os
import select
import socket
import struct
import sys
from pathlib import Path
from typing import NoReturn

from orchestrator.sandbox import cgroups
from orchestrator.sandbox.mounts import (
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    PR_SET_DUMPABLE,
    PR_SET_NO_NEW_PRIVS,
    Mounter,
    SandboxError,
)
from orchestrator.sandbox.plan import SETUP_FAILED, SandboxPlan
from orchestrator.sandbox.process import (
    exec_command,
    exit_status,
    forward_to,
    limit_processes,
    set_rlimits,
    wait_for,
)
from orchestrator.sandbox.root import build_root

NAMESPACES = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC
USERNS_MISSING = (
    "user namespaces are not available to uid {uid} ({err}); the sandbox needs them without root: allow "
    "unprivileged user namespaces (sysctl user.max_user_namespaces > 0, kernel.unprivileged_userns_clone=1, "
    "kernel.apparmor_restrict_unprivileged_userns=0) or run as root"
)
ROOT_MISSING = (
    "cannot create mount, pid, network and IPC namespaces as root ({err}): the process lacks CAP_SYS_ADMIN "
    "(in a container: cap_add SYS_ADMIN with seccomp and AppArmor unconfined), or use the docker executor"
)


def map_ids(uid: int, gid: int) -> None:
    """Inside the new user namespace we are who we were outside, and nobody else exists."""
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


def loopback_up() -> None:
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        ifreq = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, siocgifflags, ifreq))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sH22x", b"lo", flags | iff_up))


def enter_namespaces(m: Mounter) -> bool:
    """Unshare every namespace (and, without root, a user namespace mapping only our ids); returns
    whether a user namespace was made. The message of a failure names what is missing."""
    if os.geteuid() == 0:
        try:
            m.unshare(NAMESPACES)
        except SandboxError as exc:
            raise SandboxError(exc.errno, ROOT_MISSING.format(err=exc.strerror)) from None
        return False
    uid, gid = os.getuid(), os.getgid()
    # After a uid drop from root the process is not dumpable, and its /proc/self (uid_map) is root's.
    m.prctl(PR_SET_DUMPABLE, 1, "prctl(DUMPABLE)")
    try:
        m.unshare(CLONE_NEWUSER)
    except SandboxError as exc:
        raise SandboxError(exc.errno, USERNS_MISSING.format(uid=uid, err=exc.strerror)) from None
    map_ids(uid, gid)
    m.unshare(NAMESPACES, "unshare(mount, pid, network, IPC) in the user namespace")
    return True


def init(plan: SandboxPlan, m: Mounter, launcher_alive: int, own_userns: bool) -> NoReturn:
    """pid 1 of the sandbox: build the root, start the command, forward signals, reap orphans."""
    command: list[int] = []
    forward_to(lambda: command[0] if command else None)
    try:
        m.die_with_parent()
        # The launcher may have died before the line above: its end of the pipe is then closed.
        if select.select([launcher_alive], [], [], 0)[0]:
            os._exit(SETUP_FAILED)
        os.close(launcher_alive)
        if plan.loopback:
            try:
                loopback_up()
            except PermissionError:
                # Root without CAP_NET_ADMIN (a container: compose's worker) cannot bring up lo in a
                # network namespace the initial user namespace owns. The sandbox then has no
                # interface at all: more confined, never less.
                pass
        build_root(plan, m)
        limit_processes(plan.pids, own_userns, plan.run_as)
        m.prctl(PR_SET_NO_NEW_PRIVS, 1, "prctl(NO_NEW_PRIVS)")
    except OSError as exc:
        print(f"kswarm sandbox: {exc}", file=sys.stderr, flush=True)
        os._exit(SETUP_FAILED)
    pid = os.fork()
    if pid == 0:
        exec_command(plan)
    command.append(pid)
    wait_for(pid, reap_others=True)


class NamespaceSandbox:
    """``Sandbox`` by this package's own ctypes calls."""

    name = "namespaces"

    def unavailable(self) -> str | None:
        return None  # whether namespaces can be made shows when one is built (probe.py)

    def describe(self) -> str:
        return "kswarm's own (ctypes: unshare, mount, pivot_root)"

    def run(self, plan: SandboxPlan) -> NoReturn:
        """The launcher: enter fresh namespaces, fork init, and stand for the command until init exits.

        Raises ``SandboxError`` (before anything ran) when the namespaces cannot be made."""
        m = Mounter()
        if os.geteuid() == 0 and not plan.run_as:
            raise SandboxError(1, "refusing to run a sandboxed command as root: give it a uid (run_as)")
        if plan.parent_pid is not None:
            m.die_with_parent()
            if os.getppid() != plan.parent_pid:  # our parent died before the line above
                os._exit(SETUP_FAILED)
        set_rlimits(plan)
        group = cgroups.SandboxCgroup.create(plan)  # the launcher and all it starts, when delegated
        own_userns = enter_namespaces(m)
        child: list[int] = []
        forward_to(lambda: child[0] if child else None)
        alive_read, alive_write = os.pipe2(os.O_CLOEXEC)  # the write end stays open while we live
        pid = os.fork()
        if pid == 0:
            os.close(alive_write)
            init(plan, m, alive_read, own_userns)
        os.close(alive_read)
        child.append(pid)
        if group is None:
            wait_for(pid, reap_others=False)
        _, status = os.waitpid(pid, 0)
        group.remove()
        os._exit(exit_status(status))
