"""The fork server's zygote: a pristine ``python -I -`` that has imported torch and Triton once and forks
one fresh child per candidate. Sent as source by forkserver.py, never importable by name.

The zygote never runs candidate code and never holds anything of a job: no plan, no inputs, no
harness module other than this one, nothing drawn at random (every per-job value is drawn by the
parent, or in the child, after the fork). Per fork it receives four descriptors on its control socket
(the child's plan and report pipes, its stdout and stderr) and:

- in the child: leaves the serving loop (whose frame and state are dropped), closes every descriptor
  but its own five, starts a session of its own, makes itself dumpable again (a normal process) and
  returns the plan and report descriptors to the bootstrap, which loads the runner as before;
- in the zygote: reports the child's pid, waits for it to exit, then kills and reaps every process the
  child left behind (the zygote is a child subreaper: orphans of the candidate's process tree become
  its children, a ``setsid`` daemon included), and only then reports the exit status. One child at a
  time: the next candidate is forked only when nothing of the previous one is left.

The zygote is not dumpable, so a child (same uid, no ``CAP_SYS_PTRACE``) can neither read nor write
its memory through ``/proc/<pid>/mem`` or ptrace; its control socket is closed in every child.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import select
import signal
import socket
import sys
from typing import Any

# prctl(2) options.
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
MAX_MESSAGE = 1 << 16
FORK_FDS = 4  # plan pipe (read end), report pipe (write end), stdout, stderr
SWEEP_ROUNDS = 1000
# What the child-side harness modules import: loaded once here, so a child only compiles the runner.
# Nothing a fresh child would not import anyway (its sys.modules is what it was without a zygote).
PRELOAD = (
    "torch",
    "triton",
    "triton.language",
    "triton.runtime.jit",
    "triton.runtime.autotuner",
    "triton.runtime.interpreter",
    "torch.utils._python_dispatch",
    "numpy",
    "atexit",
    "dataclasses",
    "functools",
    "gc",
    "importlib.util",
    "io",
    "linecache",
    "math",
    "operator",
    "random",
    "re",
    "resource",
    "secrets",
    "threading",
    "time",
    "traceback",
    "types",
)


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _preload(extra: list[str]) -> None:
    for name in (*PRELOAD, *extra):
        importlib.import_module(name)


def _request(message: bytes) -> str | None:
    try:
        request = json.loads(message)
    except ValueError:
        return None
    return request.get("op") if isinstance(request, dict) else None


def _send(sock: socket.socket, event: dict[str, Any]) -> None:
    try:
        sock.send(json.dumps(event).encode())
    except OSError:
        os._exit(0)  # the parent is gone


def _children(me: int) -> list[int]:
    """Processes whose parent is ``me`` (orphans adopted by this subreaper included), zombies too."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == me:
            out.append(int(name))
    return out


def _sweep() -> None:
    """Kill and reap every process left below the zygote (what the last child started)."""
    me = os.getpid()
    for _ in range(SWEEP_ROUNDS):
        left = _children(me)
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except PermissionError:
                continue  # not ours to kill (cannot happen below a zygote of one uid): not waited for
            except ProcessLookupError:
                pass  # a zombie: reaped below
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def _wait(sock: socket.socket, pid: int) -> int | None:
    """The child's exit status, or None when the parent went away first (the child is killed then)."""
    pidfd = os.pidfd_open(pid)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        poller.register(sock.fileno(), select.POLLIN | select.POLLHUP)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if pidfd in ready:
                return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            if sock.fileno() in ready and not sock.recv(MAX_MESSAGE, socket.MSG_PEEK):
                _kill_group(pid)
                os.waitpid(pid, 0)
                return None
            if sock.fileno() in ready:
                sock.recv(MAX_MESSAGE)  # nothing is expected while a child runs: drop it
    finally:
        os.close(pidfd)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _close_all_but(keep: set[int]) -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the directory's own descriptor, closed already


def _become_child(sock: socket.socket, fds: list[int]) -> tuple[int, int]:
    plan_r, report_w, out_w, err_w = fds
    sock.detach()
    os.setsid()  # a session and process group of its own: killed whole on timeout and after exit
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    _close_all_but({0, 1, 2, plan_r, report_w})
    for fd in (plan_r, report_w):
        os.set_inheritable(fd, True)  # as a descriptor handed to a spawned interpreter would be
    _prctl(PR_SET_DUMPABLE, 1)  # a normal process again (not inherited from the zygote's setting)
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()  # the legacy global generator would repeat the zygote's state in every child
    return plan_r, report_w


def serve(control: int, extra: list[str]) -> tuple[int, int]:
    """Serve fork requests on ``control`` until the parent closes it (then exit).

    Returns only in a forked child: its plan and report descriptors.
    """
    _prctl(PR_SET_DUMPABLE, 0)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    sock = socket.socket(fileno=control)
    try:
        _preload(extra)
    except BaseException as exc:  # a broken installation: say why, the parent reports it
        _send(sock, {"event": "broken", "error": f"{type(exc).__name__}: {exc}"[:2000]})
        os._exit(2)
    _send(sock, {"event": "ready"})
    while True:
        try:
            message, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, FORK_FDS + 1)
        except OSError:
            os._exit(0)
        if not message:
            os._exit(0)  # the parent is gone (or done): nothing to clean, no child is running
        if len(fds) != FORK_FDS or _request(message) != "fork":
            for fd in fds:
                os.close(fd)
            _send(sock, {"event": "refused", "error": "a fork request needs four descriptors"})
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            return _become_child(sock, fds)
        for fd in fds:
            os.close(fd)
        _send(sock, {"event": "forked", "pid": pid})
        status = _wait(sock, pid)
        _sweep()
        if status is None:
            os._exit(0)
        _send(sock, {"event": "exited", "pid": pid, "status": status})
