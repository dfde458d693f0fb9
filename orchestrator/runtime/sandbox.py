"""Agent isolation without root: user, mount, pid and network namespaces around a minimal root.

Used by ``orchestrator.runtime.launch`` when the process backend cannot give each agent a uid of its own
(the orchestrator is not root). All agents then share the operator's uid, so permissions cannot keep
them apart; what the agent can *see* does. The launcher (the pid the orchestrator records) unshares a
user namespace (mapping only its own uid and gid), a mount, a pid and a network namespace, then forks
the namespace's init, which builds a new root on a tmpfs and ``pivot_root``\\s into it:

- read-only (recursively, every submount too): the system dirs (``/usr``, ``/bin``, ``/lib*``, ``/etc``,
  ``/sbin``), the project (the one shared agent binary), the Python installation and the gateway's
  socket dir (read-only: an agent must not put its own listener in the gateway's place);
- read-write: the agent's own data dir (home, work, memory, history);
- fresh: ``/tmp``, ``/var/tmp``, ``/dev/shm`` (tmpfs), ``/proc`` (of the agent's own pid namespace, so no
  ``/proc/<pid>/root`` of another agent or of the orchestrator), a read-only ``/sys`` of its own network
  namespace (no cgroup mounts), a ``/dev`` with null, zero, full, random, urandom and tty only;
- hidden: ``$KSWARM_HOME`` under an empty tmpfs where a bind would show it (a home inside the project);
- nothing else: not the operator's home, not the old root (detached, so there is nothing underneath
  to unmount to).

The network namespace has only ``lo`` (brought up): like a container with ``network_mode: none``, the
agent reaches the gateway by its unix socket and nothing by TCP. The agent runs as the operator's uid
inside, with no capabilities after its ``execve`` and ``no_new_privs``; mounts it inherits are locked by
the kernel; ``pids`` limits its processes (RLIMIT_NPROC counts per user namespace since Linux 5.14).

Init (pid 1) forwards TERM/INT/HUP to the agent, reaps orphans and exits with the agent's status;
when it dies, the kernel kills everything left in the pid namespace. The launcher forwards signals to
init, and init dies with the launcher (``PR_SET_PDEATHSIG``; a pipe catches a launcher that died
first), so a ``kill -9`` of the recorded pid takes the whole agent down.
"""

from __future__ import annotations

import ctypes
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

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 1024, 2048, 4096, 16384
MS_PRIVATE, MS_RELATIME = 1 << 18, 1 << 21
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
# statvfs f_flag bit -> the mount flag a read-only remount must keep (the kernel refuses to clear them).
KEPT_FLAGS = {1: MS_RDONLY, 2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: MS_NOATIME, 2048: MS_NODIRATIME}
ST_RELATIME = 4096

SYSTEM_RO = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
NEW_ROOT = "/tmp"  # the tmpfs for the new root is mounted here, in our namespace only
SETUP_FAILED = 121  # the exit status when the sandbox could not be built: the agent never ran


class SandboxError(OSError):
    """A step of building the sandbox failed (the message names the step)."""


def libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise SandboxError(err, f"{what}: {os.strerror(err)}")


class Mounter:
    """Thin wrappers over mount(2) and friends, each failing with the step's name."""

    def __init__(self) -> None:
        self.libc = libc()

    def mount(self, source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
        rc = self.libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            flags,
            data.encode() if data else None,
        )
        check(rc, f"mount {source or fstype} on {target}")

    def bind(self, fd: int, target: str, readonly: bool) -> None:
        """Bind the tree at ``fd`` on ``target`` with its submounts (a non-recursive bind of a dir with
        mounts below it is refused in a user namespace); read-only means every one of them."""
        self.mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
        if readonly:
            for point in mount_points_under(target):
                self.mount(None, point, None, MS_BIND | MS_REMOUNT | MS_RDONLY | kept_flags(point))

    def unshare(self, flags: int) -> None:
        check(self.libc.unshare(flags), "unshare")

    def pivot_root(self, new_root: str) -> None:
        number = SYS_PIVOT_ROOT.get(platform.machine())
        if number is None:
            raise SandboxError(0, f"pivot_root: unsupported machine {platform.machine()}")
        os.chdir(new_root)
        check(self.libc.syscall(number, b".", b"."), "pivot_root")
        check(self.libc.umount2(b".", MNT_DETACH), "detach the old root")
        os.chdir("/")

    def die_with_parent(self) -> None:
        check(self.libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")


def kept_flags(point: str) -> int:
    """The flags a remount of ``point`` must keep (the kernel locks them in a user namespace)."""
    vfs, kept = os.statvfs(point), 0
    for bit, flag in KEPT_FLAGS.items():
        if vfs.f_flag & bit:
            kept |= flag
    return kept | (MS_RELATIME if vfs.f_flag & ST_RELATIME else 0)


def mount_points_under(target: str) -> list[str]:
    """``target`` and every mount point below it, shallow first (from /proc/self/mountinfo)."""

    def unescape(field: str) -> str:  # mountinfo writes space, tab, newline and backslash as \ooo
        return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)

    points = [unescape(line.split()[4]) for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    inside = [p for p in points if _under(p, target)]
    return sorted(set(inside), key=lambda p: len(Path(p).parts))


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


def _open_path(path: str) -> int | None:
    try:
        return os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return None


def _place(root: str, path: str, is_dir: bool) -> str:
    target = root + path
    if is_dir:
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):
            Path(target).touch()  # a mount point for a file
    return target


def build_root(ro: list[str], rw: list[str], hide: list[str], m: Mounter) -> None:
    """Assemble the agent's root (see the module doc) on a tmpfs, then pivot into it.

    ``ro``/``rw`` are bound at their own paths; ``hide`` paths that a bind made visible (a
    ``$KSWARM_HOME`` inside the project) are covered by an empty tmpfs. All three are applied
    shallow first, so that a bind inside a hidden dir (the agent's own data) comes back on top."""
    m.mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount propagates back to the host
    # Sources are opened before the new root's tmpfs covers NEW_ROOT (they may live under it).
    system = {p: os.path.realpath(p) for p in SYSTEM_RO if os.path.lexists(p)}
    fds = {p: _open_path(p) for p in system.values()}
    ops = [(p, "ro") for p in ro] + [(p, "rw") for p in rw] + [(p, "hide") for p in hide]
    fds.update({p: _open_path(p) for p, kind in ops if kind != "hide"})
    fds.update({f"/dev/{d}": _open_path(f"/dev/{d}") for d in DEVICES})
    try:
        m.mount("tmpfs", NEW_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64m")
        root = NEW_ROOT
        for link, real in system.items():
            if real != link:  # merged /usr: /bin -> /usr/bin stays a link
                os.symlink(os.path.relpath(real, os.path.dirname(link)), root + link)
        for real in sorted(set(system.values())):
            fd = fds[real]
            if fd is not None and not os.path.exists(root + real):
                m.bind(fd, _place(root, real, True), readonly=True)
        for tmp in ("/tmp", "/var/tmp", "/dev/shm"):
            m.mount("tmpfs", _place(root, tmp, True), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=256m")
        _build_dev(root, fds, m)
        m.mount("proc", _place(root, "/proc", True), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        _fresh_sysfs(root, m)
        bound: list[str] = []
        for path, kind in sorted(ops, key=lambda op: len(Path(op[0]).parts)):
            if kind == "hide":
                if any(_under(path, b) and b != path for b in bound) and os.path.isdir(root + path):
                    m.mount("tmpfs", root + path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
                continue
            if kind == "ro" and any(_under(path, real) for real in system.values()):
                continue  # already visible, read-only, with its system dir (a Python under /usr)
            fd = fds[path]
            if fd is None:
                raise SandboxError(2, f"needed path {path} does not exist")
            m.bind(fd, _place(root, path, os.path.isdir(f"/proc/self/fd/{fd}")), readonly=kind == "ro")
            bound.append(path)
    finally:
        for fd in fds.values():
            if fd is not None:
                os.close(fd)
    m.pivot_root(NEW_ROOT)
    m.mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _fresh_sysfs(root: str, m: Mounter) -> None:
    """A sysfs of the agent's own network namespace, read-only: only ``lo`` under /sys/class/net and no
    cgroup mounts (a bind of the host's /sys would carry writable cgroup mounts along)."""
    target = _place(root, "/sys", True)
    try:
        m.mount("sysfs", target, "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except SandboxError:
        pass  # the kernel refused (an obscured host /sys): the agent has no /sys, which it can do without


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _build_dev(root: str, fds: dict[str, int | None], m: Mounter) -> None:
    m.mount("tmpfs", _place(root, "/dev", True), "tmpfs", MS_NOSUID, "mode=0755,size=64k")
    for device in DEVICES:
        fd = fds[f"/dev/{device}"]
        if fd is not None:
            m.bind(fd, _place(root, f"/dev/{device}", False), readonly=False)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0")):
        os.symlink(target, f"{root}/dev/{name}")
    os.symlink("/proc/self/fd/1", f"{root}/dev/stdout")
    os.symlink("/proc/self/fd/2", f"{root}/dev/stderr")


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


def init(config: dict, m: Mounter, launcher_alive: int) -> NoReturn:
    """pid 1 of the agent's namespaces: build the root, start the agent, forward signals, reap."""
    agent: list[int] = []
    _forward_to(lambda: agent[0] if agent else None)
    try:
        m.die_with_parent()
        # The launcher may have died before the line above: its end of the pipe is then closed.
        if select.select([launcher_alive], [], [], 0)[0]:
            os._exit(SETUP_FAILED)
        os.close(launcher_alive)
        loopback_up()
        build_root(config["ro"], config["rw"], config.get("hide", []), m)
        limit_processes(config["limits"].get("pids"))
        check(m.libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    except OSError as exc:
        print(f"kswarm sandbox: {exc}", file=sys.stderr, flush=True)
        os._exit(SETUP_FAILED)
    pid = os.fork()
    if pid == 0:
        for sig in FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        os.chdir(config["cwd"])
        os.umask(0o077)
        os.execve(config["argv"][0], config["argv"], config["env"])
    agent.append(pid)
    wait_for(pid, reap_others=True)


def limit_processes(pids: int | None) -> None:
    """RLIMIT_NPROC counts per user namespace since Linux 5.14: in ours, it limits this agent alone.
    On older kernels it would count every process of the operator's uid, so it is left alone there."""
    major, minor = (int(x) for x in re.findall(r"\d+", platform.release())[:2])
    if pids is not None and (major, minor) >= (5, 14):
        resource.setrlimit(resource.RLIMIT_NPROC, (pids, pids))


def run_sandboxed(config: dict) -> NoReturn:
    """The launcher: enter fresh namespaces, fork init, and stand for the agent until init exits."""
    m = Mounter()
    uid, gid = os.getuid(), os.getgid()
    # After a uid drop from root the process is not dumpable, and its /proc/self (uid_map) is root's.
    check(m.libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl(DUMPABLE)")
    m.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET)
    map_ids(uid, gid)
    child: list[int] = []
    _forward_to(lambda: child[0] if child else None)
    alive_read, alive_write = os.pipe2(os.O_CLOEXEC)  # the write end stays open while we live
    pid = os.fork()
    if pid == 0:
        os.close(alive_write)
        init(config, m, alive_read)
    os.close(alive_read)
    child.append(pid)
    wait_for(pid, reap_others=False)


def join(pid: int, argv: list[str], env: dict[str, str], cwd: str) -> NoReturn:
    """``exec`` into a running sandboxed agent: its user, mount and pid namespaces, as a new child."""
    c = libc()
    owner = os.stat(f"/proc/{pid}")
    if os.geteuid() != owner.st_uid:  # root joining: become the agent first, never root inside
        os.setgroups([])
        os.setgid(owner.st_gid)
        os.setuid(owner.st_uid)
    # Every fd first: once in the agent's mounts, /proc is its own and our pid is not in it.
    kinds = (
        ("user", CLONE_NEWUSER),
        ("mnt", CLONE_NEWNS),
        ("net", CLONE_NEWNET),
        ("pid_for_children", CLONE_NEWPID),
    )
    fds = [(kind, os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY), flag) for kind, flag in kinds]
    try:
        for kind, fd, flag in fds:
            check(c.setns(fd, flag), f"setns into the {kind} namespace of pid {pid}")
    finally:
        for _, fd, _ in fds:
            os.close(fd)
    child = os.fork()
    if child == 0:
        os.chdir(cwd)
        os.umask(0o077)
        os.execve(argv[0], argv, env)
    wait_for(child, reap_others=False)
