"""Parent side of the fork server: one pristine zygote per server, one fresh fork per candidate.

The zygote is ``python -I -`` in a session of its own, started with exactly the environment, working
directory and home a child used to get (spawn.py): its bootstrap strips the project's import hooks,
loads zygote.py from the control socket under a random name and imports torch and Triton once
(zygote.py). Each ``fork`` then costs a fork, not an interpreter start and two large imports.

What a child inherits is only that pristine state: everything per job (plan, guard bands, sentinels,
schedule, seeds, the harness modules' random file names) is drawn by the parent or the child after
the fork and arrives on the child's private pipes, exactly as for a spawned child. The parent keeps
the references and judges from its own data; the zygote never sees any of it.

Between two candidates of one server: the previous child and everything it started are dead (the
zygote sweeps its subtree before it reports the exit), the working directory and home are emptied
(or, when that fails, the zygote is replaced by a fresh one with new ones), and a zygote that did not
report an exit normally is replaced too. A candidate never runs in the zygote, so it cannot change
what the next fork starts from.
"""

from __future__ import annotations

import ctypes
import inspect
import json
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from orchestrator.verify.reaping import kill_tree

HERE = Path(__file__).resolve().parent
PROJECT_ROOT = HERE.parents[1]  # the folder that holds orchestrator/, gateway/ and agents/
# The project's distribution name: what its editable install's import hooks are named after.
DISTRIBUTION = "kswarm"
# A PATH like any machine's (Triton finds its compiler there): the parent's would name its own tools.
NEUTRAL_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Variables copied from the parent when set: device selection, loader paths, and the OpenBLAS settings
# some processors here need to avoid wrong results or crashes.
PASSTHROUGH_ENV = (
    "LANG",
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_HOME",
    "ASCEND_RT_VISIBLE_DEVICES",
    "ASCEND_HOME_PATH",
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
)
MAX_MESSAGE = 1 << 16
PR_SET_DUMPABLE = 4
EXIT_GRACE_S = 30.0  # after a kill, how long the zygote has to report the exit
TAIL = 4000


# The zygote's bootstrap (stdin of ``python -I -``). Everything after ``serve`` returns runs only in a
# forked child: it reads the harness's child-side modules and the plan from its plan pipe, loads them
# under per-job random file names, removes them from sys.modules and hands over to the runner (or to
# the module the header names as "main": a counterexample generator's generator_child.py).
def tree_free_path(paths: list[str], roots: list[str], dist: str) -> list[str]:
    """``paths`` without the entries that make the tree importable: the project root (put there by a
    plain ``.pth`` of an editable install) and an editable finder's path hook. An entry that merely
    lies under a directory named like the project (a venv in ``~/kswarm/.venv``) is kept: it holds
    torch. Its source is part of the zygote's bootstrap (so it has no braces: BOOT is formatted)."""
    import os

    kept = []
    for path in paths:
        if os.path.realpath(path or os.curdir) in roots:
            continue
        if "__editable__" in path and dist in path:
            continue
        kept.append(path)
    return kept


BOOT = (
    inspect.getsource(tree_free_path)
    + """\
def main():
    import json, linecache, os, sys, types
    # An editable install of the project (a .pth finder) would make the harness importable by name
    # and list it in sys.modules: take it out before anything else runs.
    mine = lambda obj: "{dist}" in str(getattr(obj, "__module__", obj)) or "{dist}" in repr(obj)
    for name in [n for n in sys.modules if "{dist}" in n]:
        del sys.modules[name]
    sys.meta_path[:] = [f for f in sys.meta_path if not mine(f) and not mine(type(f))]
    sys.path_hooks[:] = [h for h in sys.path_hooks if not mine(h)]
    sys.path[:] = tree_free_path(sys.path, {roots!r}, "{dist}")
    for key in [k for k in sys.path_importer_cache if "{dist}" in str(k)]:
        del sys.path_importer_cache[key]
    sys.argv[:] = [""]
    sys.orig_argv[:] = [sys.executable]
    sys.dont_write_bytecode = True
    zygote = {{"__name__": "{zname}"}}
    exec(compile(os.read({control}, 1 << 22).decode(), "{zfile}", "exec"), zygote)
    fd_in, fd_out = zygote["serve"]({control}, {extra!r})
    zygote.clear()
    del zygote
    def read(n):
        out = b""
        while len(out) < n:
            chunk = os.read(fd_in, n - len(out))
            if not chunk:
                raise SystemExit(2)
            out += chunk
        return out
    bundle = json.loads(read(int.from_bytes(read(9)[1:], "big")))
    for name in ("orchestrator", "orchestrator.verify"):
        package = types.ModuleType(name)
        package.__path__ = []
        sys.modules[name] = package
    loaded = {{}}
    for name, filename, source in bundle["modules"]:
        module = types.ModuleType(name)
        module.__file__ = filename
        sys.modules[name] = module
        setattr(sys.modules["orchestrator.verify"], name.rsplit(".", 1)[1], module)
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), module.__dict__)
        loaded[name] = module
    for name in list(sys.modules):
        if name == "orchestrator" or name.startswith("orchestrator."):
            del sys.modules[name]
    runner = loaded[bundle.get("main", "orchestrator.verify.runner")]
    return runner.run(bundle["plan"], fd_in, fd_out, {{n: vars(m) for n, m in loaded.items()}})
raise SystemExit(main())
"""
)


def child_env(home: Path, *, interpret: bool) -> dict[str, str]:
    """The zygote's environment, and so every child's: what a production process has, nothing more."""
    env = {k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ}
    env["PATH"] = NEUTRAL_PATH
    env.setdefault("LANG", "C.UTF-8")
    env["HOME"] = str(home)  # private and empty: ~/.triton/cache lands here, never a shared cache
    env["OMP_NUM_THREADS"] = "1"  # also: no OpenMP thread in the zygote when it forks
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    return env


def make_undumpable() -> bool:
    """Make this process non-dumpable (prctl PR_SET_DUMPABLE 0): a process of the same uid without
    CAP_SYS_PTRACE -- the candidate's child -- can then neither ptrace it nor open its
    ``/proc/<pid>/mem``, so it can neither read the references nor write the verdict there.
    (Without Yama, a same-uid process may otherwise read and write another's memory.)"""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


class ForkServerError(RuntimeError):
    """The zygote could not start, broke or died: no child could be run (the candidate's or not)."""


@dataclass(frozen=True)
class Forked:
    """One forked child, from the parent's side: its pid and the parent's ends of its four pipes."""

    pid: int
    plan_w: int
    report_r: int
    stdout_r: int
    stderr_r: int


class _Drain(threading.Thread):
    """Reads the zygote's own stdout/stderr (never a child's), keeping a tail for error messages."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd, self.data = fd, b""

    def run(self) -> None:
        try:
            while chunk := os.read(self.fd, 65536):
                self.data = (self.data + chunk)[-TAIL:]
        except OSError:
            pass


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _empty(folder: Path) -> bool:
    """Remove everything inside ``folder`` (a candidate may have made parts of it read-only)."""

    def retry(func: object, path: str, _exc: object) -> None:
        try:
            os.chmod(os.path.dirname(path), 0o700)
            os.chmod(path, 0o700)
        except OSError:
            pass
        if callable(func):
            func(path)

    try:
        for entry in os.scandir(folder):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, onerror=retry)
            else:
                os.unlink(entry.path)
        return not any(os.scandir(folder))
    except OSError:
        return False


class _Zygote:
    """One zygote process and its control socket."""

    def __init__(self, python: str, interpret: bool, extra: tuple[str, ...]) -> None:
        self.cwd, self.home = Path(tempfile.mkdtemp()), Path(tempfile.mkdtemp())
        parent_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = parent_end
        self.ready = False
        self.clean = True  # the last child's exit was reported: the next fork may reuse this zygote
        boot = BOOT.format(
            dist=DISTRIBUTION,
            roots=[os.path.realpath(PROJECT_ROOT)],
            control=zygote_end.fileno(),
            zname=f"_{secrets.token_hex(5)}",
            zfile=f"<{secrets.token_hex(5)}>",
            extra=list(extra),
        )
        try:
            self.proc = subprocess.Popen(
                [python, "-I", "-"],
                cwd=self.cwd,
                env=child_env(self.home, interpret=interpret),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(zygote_end.fileno(),),
                start_new_session=True,  # its own process group: killed whole on close
            )
        finally:
            zygote_end.close()
        assert self.proc.stdin is not None and self.proc.stdout is not None and self.proc.stderr is not None
        self.drains = [_Drain(self.proc.stdout.fileno()), _Drain(self.proc.stderr.fileno())]
        for drain in self.drains:
            drain.start()
        try:
            self.sock.send((HERE / "zygote.py").read_bytes())
            self.proc.stdin.write(boot.encode())
            self.proc.stdin.close()
        except OSError:
            pass  # it died at once: the first request says so

    def tail(self) -> str:
        """What the zygote wrote (once it is gone, all of it)."""
        try:
            self.proc.wait(timeout=5)
            for drain in self.drains:
                drain.join(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        return b"".join(d.data for d in self.drains).decode("utf-8", errors="replace")[-TAIL:]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def receive(self, deadline: float) -> dict[str, object] | None:
        """The next event from the zygote, or None at its end; TimeoutError past the deadline."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                continue
            try:
                message = self.sock.recv(MAX_MESSAGE)
            except OSError:
                return None
            if not message:
                return None
            event = json.loads(message)
            if event.get("event") == "ready":
                self.ready = True
                continue
            return event if isinstance(event, dict) else None

    def close(self) -> None:
        # Whatever state it is in (serving, running a child, or stopped by a candidate so that it can
        # neither sweep nor answer): everything below it dies first, then it does. Not yet reaped, its
        # pid cannot have been reused.
        if self.proc.poll() is None:
            kill_tree(self.proc.pid)
        self.sock.close()
        _kill_group(self.proc.pid)
        self.proc.wait()
        for drain in self.drains:
            drain.join(timeout=5)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        shutil.rmtree(self.cwd, ignore_errors=True)
        shutil.rmtree(self.home, ignore_errors=True)


def shared_root(root: Path) -> str | None:
    """Why the zygote cannot leave ``root`` (the tree's) off the candidates' sys.path: other
    distributions are installed there too (kswarm installed as plain packages into a site-packages,
    beside torch), so leaving it off would take them with it. None when ``root`` holds the tree alone (a
    checkout, an editable install, or ``pip install --target DIR`` plus a ``.pth``, as the worker images
    do), whatever the directory is called."""
    others = sorted(
        p.name for p in root.glob("*.dist-info") if not p.name.lower().startswith(f"{DISTRIBUTION}-")
    )
    if (root / "torch" / "__init__.py").is_file():
        others.insert(0, "torch")
    if not others:
        return None
    return (
        f"kswarm is installed into {root} beside other packages ({', '.join(others[:3])}): the harness "
        "keeps its own code off the candidates' sys.path by leaving that directory out, which would take "
        "them with it; install kswarm editable (pip install -e) or into a directory of its own (pip "
        "install --target DIR and a .pth naming DIR), as infra/worker.Dockerfile does"
    )


class ForkServer:
    """A zygote for one pool kind (interpreter or device), forking one child at a time.

    ``start()`` launches the zygote without waiting for it (its imports overlap the caller's own work);
    ``fork()`` waits until it is ready. Use as a context manager, or ``close()`` it.
    """

    def __init__(
        self, *, interpret: bool, extra_modules: tuple[str, ...] = (), python: str | None = None
    ) -> None:
        self.interpret = interpret
        self.extra = extra_modules
        self.python = python or sys.executable
        self._zygote: _Zygote | None = None
        self._lock = threading.Lock()  # one child at a time
        self._running: int | None = None

    def __enter__(self) -> ForkServer:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def zygote_pid(self) -> int | None:
        return self._zygote.proc.pid if self._zygote is not None else None

    def start(self) -> None:
        if self._zygote is None or not self._zygote.alive() or not self._zygote.clean:
            self._retire()
            if shared_root(Path(os.path.realpath(PROJECT_ROOT))) is not None:
                return  # fork() says why, as the job's failure (no zygote that would lose torch)
            self._zygote = _Zygote(self.python, self.interpret, self.extra)

    def _retire(self) -> None:
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None

    def close(self) -> None:
        with self._lock:
            self._retire()

    def fork(self, deadline: float) -> Forked:
        """A fresh child of a pristine zygote (waits for the zygote's imports, up to ``deadline``)."""
        self._lock.acquire()
        try:
            return self._fork(deadline)
        except BaseException:
            self._lock.release()
            raise

    def _fork(self, deadline: float) -> Forked:
        why = shared_root(Path(os.path.realpath(PROJECT_ROOT)))
        if why is not None:
            raise ForkServerError(why)
        self.start()
        zygote = self._zygote
        assert zygote is not None
        if not (_empty(zygote.cwd) and _empty(zygote.home)):
            self._retire()  # something the last child left cannot be removed: new dirs, new zygote
            self.start()
            zygote = self._zygote
            assert zygote is not None
        plan_r, plan_w = os.pipe()
        report_r, report_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        theirs = [plan_r, report_w, out_w, err_w]
        try:
            socket.send_fds(zygote.sock, [json.dumps({"op": "fork"}).encode()], theirs)
        except OSError:
            pass  # the zygote is gone: receive() says so
        finally:
            for fd in theirs:
                os.close(fd)
        zygote.clean = False
        try:
            event = zygote.receive(deadline)
        except TimeoutError:
            event = {"event": "timeout"}
        if event is None or event.get("event") != "forked" or not isinstance(event.get("pid"), int):
            for fd in (plan_w, report_r, out_r, err_r):
                os.close(fd)
            why = self._why(zygote, event)
            self._retire()
            raise ForkServerError(why)
        pid = int(event["pid"])  # type: ignore[call-overload]
        self._running = pid
        return Forked(pid=pid, plan_w=plan_w, report_r=report_r, stdout_r=out_r, stderr_r=err_r)

    @staticmethod
    def _why(zygote: _Zygote, event: dict[str, object] | None) -> str:
        if event is not None and event.get("event") == "timeout":
            return "the fork server was not ready in time"
        if event is not None and event.get("error"):
            return f"the fork server is broken: {str(event['error'])[:500]}"
        return f"the fork server died: {zygote.tail().strip()[-500:]}"

    def wait(self, child: Forked, deadline: float) -> tuple[int | None, bool, str | None]:
        """(exit code as Popen gives it, timed out, why no exit code is known) once the child and
        everything it started are gone. Kills the child's process group at the deadline."""
        zygote = self._zygote
        assert zygote is not None and self._running == child.pid
        timed_out = False
        try:
            try:
                event = zygote.receive(deadline)
            except TimeoutError:
                timed_out = True
                _kill_group(child.pid)
                try:
                    event = zygote.receive(time.monotonic() + EXIT_GRACE_S)
                except TimeoutError:
                    event = None
            _kill_group(child.pid)  # stray processes of a finished child (the zygote swept its own)
            if event is None or event.get("event") != "exited" or event.get("pid") != child.pid:
                self._retire()
                return None, timed_out, "the fork server died or stopped answering while the child ran"
            zygote.clean = True
            status = event.get("status")
            return (status if isinstance(status, int) else None), timed_out, None
        finally:
            self._running = None
            self._lock.release()
