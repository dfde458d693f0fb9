"""The sandbox's root: a tmpfs holding only what the plan names, then ``pivot_root`` into it."""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.sandbox.mounts import (
    MS_BIND,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    MS_REMOUNT,
    Mounter,
    SandboxError,
    under,
)
from orchestrator.sandbox.plan import DEVICES, PRIVATE_TMPFS, SYSTEM_RO, SandboxPlan

NEW_ROOT = "/tmp"  # the tmpfs for the new root is mounted here, in our mount namespace only


def _open_path(path: str) -> int | None:
    try:
        return os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return None


def _place(root: str, path: str, is_dir: bool) -> str:
    target = root + path
    if is_dir:
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        if not os.path.exists(target):
            Path(target).touch()  # a mount point for a file
    return target


def build_root(plan: SandboxPlan, m: Mounter) -> None:
    """Assemble the root on a tmpfs, then pivot into it and make ``/`` itself read-only.

    Order: system dirs, ``/dev``, the private tmpfs dirs, ``/proc``, ``/sys``, then the plan's binds
    and hides shallow first -- so that a bind inside a private tmpfs (a job's dirs under ``/tmp``) or a
    hidden dir (an agent's data inside a hidden ``$KSWARM_HOME``) lands on top of it."""
    m.mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount propagates back to the host
    # Sources are opened before the new root's tmpfs covers NEW_ROOT (they may live under it).
    system = {p: os.path.realpath(p) for p in SYSTEM_RO if os.path.lexists(p)}
    fds = {p: _open_path(p) for p in system.values()}
    ops = [(p, "ro") for p in plan.ro] + [(p, "rw") for p in plan.rw] + [(p, "hide") for p in plan.hide]
    fds.update({p: _open_path(p) for p, kind in ops if kind != "hide"})
    devices = [f"/dev/{d}" for d in DEVICES] + list(plan.devices)
    fds.update({d: _open_path(d) for d in devices})
    try:
        m.mount("tmpfs", NEW_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64m")
        root = NEW_ROOT
        for link, real in system.items():
            if real != link:  # merged /usr: /bin -> /usr/bin stays a link
                os.symlink(os.path.relpath(real, os.path.dirname(link)), root + link)
        bound = sorted(set(system.values()))
        for real in bound:
            fd = fds[real]
            if fd is not None and not os.path.exists(root + real):
                m.bind(fd, _place(root, real, True), readonly=True)
        _build_dev(root, devices, fds, m)
        tmpfs_opts = f"mode=1777,size={plan.tmpfs_size}"
        for tmp in PRIVATE_TMPFS:
            m.mount("tmpfs", _place(root, tmp, True), "tmpfs", MS_NOSUID | MS_NODEV, tmpfs_opts)
        m.mount("proc", _place(root, "/proc", True), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        _fresh_sysfs(root, m)
        for path, kind in sorted(ops, key=lambda op: len(Path(op[0]).parts)):
            if kind == "hide":
                if any(under(path, b) and b != path for b in bound) and os.path.isdir(root + path):
                    m.mount("tmpfs", root + path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
                continue
            if kind == "ro" and any(under(path, real) for real in system.values()):
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
    """A sysfs of the sandbox's own network namespace, read-only: only ``lo`` under /sys/class/net and
    no cgroup mounts (a bind of the host's /sys would carry writable cgroup mounts along)."""
    target = _place(root, "/sys", True)
    try:
        m.mount("sysfs", target, "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except SandboxError:
        pass  # the kernel refused (an obscured host /sys): no /sys, which the command can do without


def _build_dev(root: str, devices: list[str], fds: dict[str, int | None], m: Mounter) -> None:
    """A ``/dev`` of its own: the harmless character devices, the plan's device nodes, the usual links."""
    m.mount("tmpfs", _place(root, "/dev", True), "tmpfs", MS_NOSUID, "mode=0755,size=64k")
    for device in devices:
        if not under(device, "/dev") or device == "/dev":
            raise SandboxError(22, f"device {device} is not under /dev")
        fd = fds[device]
        if fd is None:
            continue
        is_dir = os.path.isdir(f"/proc/self/fd/{fd}")
        m.bind(fd, _place(root, device, is_dir), readonly=False)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0")):
        os.symlink(target, f"{root}/dev/{name}")
    os.symlink("/proc/self/fd/1", f"{root}/dev/stdout")
    os.symlink("/proc/self/fd/2", f"{root}/dev/stderr")
