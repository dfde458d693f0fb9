"""``python -m orchestrator.runtime.launch CONFIG_JSON``: set up one agent's isolation, then exec it.

Runs as the orchestrator's user in the freshly spawned (single-threaded) child, so none of this happens
in a ``preexec_fn`` of a threaded parent. Steps, in order:

1. rlimits (address space, CPU seconds, open files, file size, no core dumps; processes when it has
   its own uid);
2. with a uid: a network namespace of its own (only ``lo``, up: the gateway is reached by its unix
   socket, nothing by TCP) and a private mount namespace with its own read-only ``/sys`` (only ``lo``)
   and a ``/proc`` that shows only its uid's processes (``hidepid=2``), in which
   - ``/tmp``, ``/var/tmp`` and ``/dev/shm`` are fresh tmpfs (no side channel between agents), and
   - every ancestor of a path the agent needs that its uid cannot traverse (``/root`` holding a pyenv
     Python, a 0700 ``$KSWARM_HOME``) is covered by a tmpfs on which only the needed children are
     bound back -- so the agent reaches its interpreter and socket, and nothing else there;
   then drop to the uid (no supplementary groups);
3. ``chdir`` to the work dir, ``umask 077``, ``execve`` the agent with exactly the given environment.

With ``mode: userns`` the last step hands over to the one sandbox (``orchestrator.sandbox``: user,
mount, pid, network and IPC namespaces around a minimal root holding only what the agent needs, and a
seccomp filter): without root as the operator's uid; as root after steps 1-2, so that the agent has both
a uid and a sandbox of its own.
"""

from __future__ import annotations

import json
import os
import resource
import stat
import sys
from pathlib import Path

from orchestrator.sandbox.mounts import (
    CLONE_NEWNET,
    CLONE_NEWNS,
    MS_BIND,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    Mounter,
)
from orchestrator.sandbox.plan import SETUP_FAILED, SandboxPlan
from orchestrator.sandbox.spawn import join, loopback_up, run_sandboxed

PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm")


def traversable(path: Path, uid: int) -> bool:
    st = path.stat()
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == uid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def plan_hides(needed: list[Path], uid: int) -> dict[Path, set[str]]:
    """Dirs to cover with a tmpfs -> the child names to bind back into them."""
    hides: dict[Path, set[str]] = {Path(p): set() for p in PRIVATE_TMP if Path(p).is_dir()}
    for path in needed:
        for depth in range(1, len(path.parts)):
            ancestor = Path(*path.parts[:depth])
            if ancestor in hides or not traversable(ancestor, uid):
                hides.setdefault(ancestor, set()).add(path.parts[depth])
    return hides


def hide(m: Mounter, directory: Path, keep: set[str]) -> None:
    """Cover ``directory`` with an empty tmpfs, binding ``keep`` (its children) back in."""
    fds = {name: os.open(directory / name, os.O_PATH) for name in sorted(keep) if (directory / name).exists()}
    try:
        mode = "1777" if str(directory) in PRIVATE_TMP else "0755"
        m.mount("tmpfs", str(directory), "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode},size=256m")
        for name, fd in fds.items():
            target = directory / name
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                target.mkdir()
            else:
                target.touch()
            m.mount(f"/proc/self/fd/{fd}", str(target), None, MS_BIND | MS_REC)
    finally:
        for fd in fds.values():
            os.close(fd)


def isolate(needed: list[Path], uid: int) -> None:
    m = Mounter()
    m.unshare(CLONE_NEWNS | CLONE_NEWNET, "unshare(mount, network)")
    loopback_up()  # its own lo: a TCP bridge to the gateway's socket (the Claude Code CLI's) binds there
    m.mount(None, "/", None, MS_REC | MS_PRIVATE)  # our mounts must not leak to the host
    # A sysfs of its own network namespace (only lo under /sys/class/net), read-only, no cgroup mounts.
    m.mount("sysfs", "/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    # A /proc that shows only its own uid's processes: the host's command lines (a worker started with
    # --token, another agent's arguments) are not for it to read.
    m.mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2")
    hides = plan_hides([p.resolve() for p in needed], uid)
    for directory in sorted(hides, key=lambda p: len(p.parts)):  # shallow first: deeper ones are inside
        hide(m, directory, hides[directory])


def join_namespaces(pid: int) -> None:
    """``exec`` into a running agent: enter its mount and network namespaces (its view, its lo)."""
    m = Mounter()
    for kind, flag in (("mnt", CLONE_NEWNS), ("net", CLONE_NEWNET)):
        fd = os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY)
        try:
            m.setns(fd, flag, f"setns into the {kind} namespace of pid {pid}")
        finally:
            os.close(fd)


def sandbox_plan(config: dict) -> SandboxPlan:
    """The agent's sandbox (``userns`` mode) from its launch config."""
    return SandboxPlan(
        argv=config["argv"],
        env=config["env"],
        cwd=config["cwd"],
        ro=config.get("ro", []),
        rw=config.get("rw", []),
        hide=config.get("hide", []),
        pids=config["limits"].get("pids"),
    )


def set_limits(limits: dict[str, int | None], own_uid: bool) -> None:
    table = {
        "memory": resource.RLIMIT_AS,
        "cpu_time_s": resource.RLIMIT_CPU,
        "files": resource.RLIMIT_NOFILE,
        "file_size": resource.RLIMIT_FSIZE,  # resources.disk: no one file past the agent's disk bound
    }
    if own_uid:  # RLIMIT_NPROC counts every process of the uid: only meaningful with a uid of its own
        table["pids"] = resource.RLIMIT_NPROC
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for key, which in table.items():
        value = limits.get(key)
        if value is not None:
            resource.setrlimit(which, (value, value))


def main(argv: list[str]) -> None:
    config = json.loads(argv[1])
    uid: int | None = config.get("uid")
    userns = config.get("mode") == "userns"
    set_limits(config["limits"], own_uid=uid is not None)
    if userns and config.get("join_pid"):
        join(int(config["join_pid"]), sandbox_plan(config))
    if uid is not None:
        if config.get("join_pid"):
            join_namespaces(int(config["join_pid"]))
        else:
            isolate([Path(p) for p in config["needed"]], uid)
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    if userns:  # as root, with the uid above as well: the sandbox is built by the agent's own uid
        run_sandboxed(sandbox_plan(config))
    os.chdir(config["cwd"])
    os.umask(0o077)
    os.execve(config["argv"][0], config["argv"], config["env"])


if __name__ == "__main__":
    try:
        main(sys.argv)
    except OSError as exc:
        print(f"kswarm launch: {exc}", file=sys.stderr, flush=True)
        sys.exit(SETUP_FAILED)  # a distinct status: the launch failed, the agent never ran
