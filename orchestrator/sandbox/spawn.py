"""The sandbox's entry points: ``run_sandboxed`` (be a sandbox's launcher, with the implementation
``choose_sandbox`` picks) and ``join`` (run another command inside a running sandbox).

Which implementation: ``$KSWARM_SANDBOX`` (``bubblewrap`` or ``namespaces``) when set; otherwise
bubblewrap where it is installed and unprivileged user namespaces are allowed (it always builds its
sandbox without privilege), else this package's own namespace sandbox (which, as root, needs no user
namespace)."""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path
from typing import NoReturn

from orchestrator.sandbox.bubblewrap import BubblewrapSandbox
from orchestrator.sandbox.mounts import (
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    Mounter,
    SandboxError,
)
from orchestrator.sandbox.namespaces import NamespaceSandbox, loopback_up
from orchestrator.sandbox.plan import SandboxPlan
from orchestrator.sandbox.process import become, children, exec_command, wait_for
from orchestrator.sandbox.protocol import Sandbox

__all__ = ["choose_sandbox", "join", "loopback_up", "run_sandboxed", "userns_refused"]
IMPLEMENTATIONS: dict[str, type[BubblewrapSandbox] | type[NamespaceSandbox]] = {
    "bubblewrap": BubblewrapSandbox,
    "namespaces": NamespaceSandbox,
}
NS_GET_USERNS = 0xB701  # ioctl: the user namespace that owns a namespace
USERNS_SYSCTLS = (
    ("/proc/sys/user/max_user_namespaces", "0", "user.max_user_namespaces = 0"),
    ("/proc/sys/kernel/unprivileged_userns_clone", "0", "kernel.unprivileged_userns_clone = 0"),
    (
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
        "1",
        "kernel.apparmor_restrict_unprivileged_userns = 1",
    ),
)


def userns_refused() -> str | None:
    """The sysctl that refuses unprivileged user namespaces here, if one does."""
    for path, refusing, text in USERNS_SYSCTLS:
        try:
            if Path(path).read_text().strip() == refusing:
                return text
        except OSError:
            continue
    return None


def _can_enter(st: os.stat_result, uid: int) -> bool:
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == uid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def unreachable_by(plan: SandboxPlan, uid: int) -> str | None:
    """A path the plan binds that ``uid`` cannot reach (an ancestor it may not traverse), if any."""
    for path in [*plan.ro, *plan.rw, plan.argv[0]]:
        parts = Path(path).parts
        for depth in range(1, len(parts)):
            ancestor = Path(*parts[:depth])
            try:
                if not _can_enter(ancestor.stat(), uid):
                    return str(ancestor)
            except OSError:
                return str(ancestor)
    return None


def choose_sandbox(env: dict[str, str] | None = None, plan: SandboxPlan | None = None) -> Sandbox:
    """The implementation to build ``plan``'s sandbox with (see the module's text). As root, bubblewrap
    runs as the plan's ``run_as`` uid, so it is chosen only when that uid can reach every bound path."""
    env = dict(os.environ) if env is None else env
    wanted = env.get("KSWARM_SANDBOX", "auto")
    if wanted in IMPLEMENTATIONS:
        return IMPLEMENTATIONS[wanted]()
    if wanted != "auto":
        raise SandboxError(22, f"KSWARM_SANDBOX={wanted}: choose auto, bubblewrap or namespaces")
    bwrap = BubblewrapSandbox()
    if bwrap.unavailable() is not None or userns_refused() is not None:
        return NamespaceSandbox()
    if os.geteuid() == 0 and (plan is None or plan.run_as is None or unreachable_by(plan, plan.run_as)):
        return NamespaceSandbox()
    return bwrap


def run_sandboxed(plan: SandboxPlan) -> NoReturn:
    """Be the launcher of ``plan``'s sandbox (raises ``SandboxError`` before anything ran)."""
    choose_sandbox(plan=plan).run(plan)


def _ns(pid: int, kind: str) -> str:
    return os.readlink(f"/proc/{pid}/ns/{kind}")


def namespace_holder(pid: int) -> int:
    """The process holding the sandbox's namespaces among ``pid`` and its first descendants: the first
    in a user namespace other than ours (the namespace launcher itself, bubblewrap's pid 1 under
    launcher -> bwrap), else the first in another mount namespace (a sandbox built by root). A launcher
    whose namespaces are all ours (not a sandbox) is refused: joining it would run unconfined."""
    chain = [pid]
    while len(chain) < 5 and (kids := children(chain[-1])):
        chain.append(kids[0])
    for kind in ("user", "mnt"):
        ours = _ns(os.getpid(), kind)
        for current in chain:
            if _ns(current, kind) != ours:
                return current
    raise SandboxError(3, f"pid {pid} holds no sandbox (its namespaces are this process's)")


def join(pid: int, plan: SandboxPlan) -> NoReturn:
    """Run ``plan``'s command inside the running sandbox whose launcher is ``pid``: its user, mount,
    network, IPC and pid namespaces, as the sandbox's uid (never root inside), under the same filter."""
    owner = os.stat(f"/proc/{pid}")
    if os.geteuid() != owner.st_uid:  # root joining: become the sandbox's uid first
        become(owner.st_uid)
    holder = namespace_holder(pid)
    # The namespace launcher is outside the pid namespace it made (pid_for_children); bwrap's init inside.
    pid_kind = "pid_for_children" if _ns(holder, "pid") == _ns(os.getpid(), "pid") else "pid"
    m = Mounter()
    # Every fd first: once in the sandbox's mounts, /proc is its own and our pid is not in it.
    opened = {
        k: os.open(f"/proc/{holder}/ns/{k}", os.O_RDONLY) for k in ("user", "mnt", "net", "ipc", pid_kind)
    }
    # The user namespace that owns the mounts first (bwrap's --disable-userns nests the command's one
    # inside it: only from the owner may the mount namespace be entered), then the command's own.
    mounts_owner = fcntl.ioctl(opened["mnt"], NS_GET_USERNS)
    ours = os.stat("/proc/self/ns/user").st_ino
    fds: list[tuple[str, int, int]] = []
    if os.fstat(mounts_owner).st_ino != ours:  # (a sandbox root built has no user namespace)
        fds.append(("user (owner of the mounts)", mounts_owner, CLONE_NEWUSER))
    else:
        os.close(mounts_owner)
    fds += [
        (k, opened[k], flag)
        for k, flag in (("mnt", CLONE_NEWNS), ("net", CLONE_NEWNET), ("ipc", CLONE_NEWIPC))
    ]
    fds.append((pid_kind, opened[pid_kind], CLONE_NEWPID))
    if os.fstat(opened["user"]).st_ino not in (
        ours,
        *(os.fstat(fd).st_ino for k, fd, _ in fds if k[:4] == "user"),
    ):
        fds.append(("user", opened["user"], CLONE_NEWUSER))
    else:
        os.close(opened["user"])
    try:
        for kind, fd, flag in fds:
            m.setns(fd, flag, f"setns into the {kind} namespace of pid {holder}")
    finally:
        for _, fd, _ in fds:
            os.close(fd)
    child = os.fork()
    if child == 0:
        exec_command(plan.model_copy(update={"run_as": None}))
    wait_for(child, reap_others=False)
