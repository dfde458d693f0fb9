"""The sandbox's processes: the launcher enters fresh namespaces, forks the namespace's init, which
builds the root and starts the command; ``join`` runs another command inside a running sandbox."""

from __future__ import annotations

import fcntl
import os
import platform
import re
import resource
import select
import signal
import socket
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from orchestrator.sandbox import seccomp
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
from orchestrator.sandbox.root import build_root

NAMESPACES = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
RLIMITS = {
    "as": resource.RLIMIT_AS,
    "cpu": resource.RLIMIT_CPU,
    "nofile": resource.RLIMIT_NOFILE,
    "fsize": resource.RLIMIT_FSIZE,
}
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


def _exit_status(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def _forward_to(target: Callable[[], int | None]) -> None:
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
            os._exit(_exit_status(status))


def limit_processes(pids: int | None, own_userns: bool, run_as: int | None) -> None:
    """RLIMIT_NPROC counts per user namespace since Linux 5.14, so in our own user namespace it limits
    this sandbox alone; with a uid of its own (root's path) it counts that uid. Otherwise (an older
    kernel, the operator's uid shared with everything else) it is left alone."""
    major, minor = (int(x) for x in re.findall(r"\d+", platform.release())[:2])
    if pids is not None and ((own_userns and (major, minor) >= (5, 14)) or run_as is not None):
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


def init(plan: SandboxPlan, m: Mounter, launcher_alive: int, own_userns: bool) -> NoReturn:
    """pid 1 of the sandbox: build the root, start the command, forward signals, reap orphans."""
    command: list[int] = []
    _forward_to(lambda: command[0] if command else None)
    try:
        m.die_with_parent()
        # The launcher may have died before the line above: its end of the pipe is then closed.
        if select.select([launcher_alive], [], [], 0)[0]:
            os._exit(SETUP_FAILED)
        os.close(launcher_alive)
        if plan.loopback:
            loopback_up()
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


def run_sandboxed(plan: SandboxPlan) -> NoReturn:
    """The launcher: enter fresh namespaces, fork init, and stand for the command until init exits.

    Raises ``SandboxError`` (before anything ran) when the namespaces cannot be made."""
    m = Mounter()
    if os.geteuid() == 0 and not plan.run_as:
        raise SandboxError(1, "refusing to run a sandboxed command as root: give it a uid (run_as)")
    if plan.parent_pid is not None:
        m.die_with_parent()
        if os.getppid() != plan.parent_pid:  # our parent died before the line above
            os._exit(SETUP_FAILED)
    for name, value in plan.rlimits.items():
        resource.setrlimit(RLIMITS[name], (value, value))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    own_userns = enter_namespaces(m)
    child: list[int] = []
    _forward_to(lambda: child[0] if child else None)
    alive_read, alive_write = os.pipe2(os.O_CLOEXEC)  # the write end stays open while we live
    pid = os.fork()
    if pid == 0:
        os.close(alive_write)
        init(plan, m, alive_read, own_userns)
    os.close(alive_read)
    child.append(pid)
    wait_for(pid, reap_others=False)


def join(pid: int, plan: SandboxPlan) -> NoReturn:
    """Run ``plan``'s command inside the running sandbox whose launcher is ``pid``: its user, mount,
    network, IPC and pid namespaces, as the sandbox's uid (never root inside), under the same filter."""
    owner = os.stat(f"/proc/{pid}")
    if os.geteuid() != owner.st_uid:  # root joining: become the sandbox's uid first
        become(owner.st_uid)
    # Every fd first: once in the sandbox's mounts, /proc is its own and our pid is not in it.
    kinds = (
        ("user", CLONE_NEWUSER),
        ("mnt", CLONE_NEWNS),
        ("net", CLONE_NEWNET),
        ("ipc", CLONE_NEWIPC),
        ("pid_for_children", CLONE_NEWPID),
    )
    m = Mounter()
    fds = [(kind, os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY), flag) for kind, flag in kinds]
    try:
        for kind, fd, flag in fds:
            m.setns(fd, flag, f"setns into the {kind} namespace of pid {pid}")
    finally:
        for _, fd, _ in fds:
            os.close(fd)
    child = os.fork()
    if child == 0:
        exec_command(plan.model_copy(update={"run_as": None}))
    wait_for(child, reap_others=False)
