"""mount(2), unshare(2), pivot_root(2) and prctl(2) through ctypes, each failing with the step's name."""

from __future__ import annotations

import ctypes
import os
import platform
import re
import signal
from pathlib import Path

CLONE_NEWNS, CLONE_NEWIPC = 0x00020000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 1024, 2048, 4096, 16384
MS_PRIVATE, MS_RELATIME = 1 << 18, 1 << 21
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
# statvfs f_flag bit -> the mount flag a read-only remount must keep (the kernel refuses to clear them).
KEPT_FLAGS = {1: MS_RDONLY, 2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: MS_NOATIME, 2048: MS_NODIRATIME}
ST_RELATIME = 4096


class SandboxError(OSError):
    """A step of building the sandbox failed (the message names the step)."""


def libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise SandboxError(err, f"{what}: {os.strerror(err)}")


def under(path: str, parent: str) -> bool:
    """Is ``path`` ``parent`` or inside it (by name; both absolute)?"""
    return path == parent or path.startswith(parent.rstrip("/") + "/")


class Mounter:
    """Thin wrappers over mount(2) and friends."""

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

    def unshare(self, flags: int, what: str = "unshare") -> None:
        check(self.libc.unshare(flags), what)

    def setns(self, fd: int, flag: int, what: str) -> None:
        check(self.libc.setns(fd, flag), what)

    def pivot_root(self, new_root: str) -> None:
        number = SYS_PIVOT_ROOT.get(platform.machine())
        if number is None:
            raise SandboxError(0, f"pivot_root: unsupported machine {platform.machine()}")
        os.chdir(new_root)
        check(self.libc.syscall(number, b".", b"."), "pivot_root")
        check(self.libc.umount2(b".", MNT_DETACH), "detach the old root")
        os.chdir("/")

    def prctl(self, option: int, value: int, what: str) -> None:
        check(self.libc.prctl(option, value, 0, 0, 0), what)

    def die_with_parent(self) -> None:
        self.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, "prctl(PDEATHSIG)")


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
    inside = [p for p in points if under(p, target)]
    return sorted(set(inside), key=lambda p: len(Path(p).parts))
