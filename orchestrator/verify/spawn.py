"""Parent side of the child process.

The child is ``python -I -``: its program arrives on stdin (a short bootstrap), the harness's own
child-side modules and the plan on a private pipe; it loads them from source under per-job random
file names and removes them from ``sys.modules`` before the candidate is imported, so nothing named
after the harness is importable or listed. Inputs, reports and outputs travel on pipes too: the
child's working directory and home are fresh, empty temporary directories, its environment holds only
what a production process has (PATH, device selection, HOME, locale), argv is neutral.

It runs in its own session (the whole process group is killed on timeout and after exit), with no
core dumps and a file-size limit; the parent drains stdout/stderr itself (a tail is kept).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.verify import protocol as proto

HERE = Path(__file__).resolve().parent
# Child-side modules in dependency order (each imports only the ones before it, torch and triton).
BUNDLE = (
    "runtime_policy",
    "protocol",
    "guards",
    "attribution",
    "monitor",
    "hostguards",
    "integrity",
    "interp",
    "timing",
    "runner",
)
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
STDERR_TAIL = 4000

BOOT = """\
def main():
    import json, linecache, os, sys, types
    # An editable install of the project (a .pth finder) would make the harness importable by name
    # and list it in sys.modules: take it out before anything else runs.
    mine = lambda obj: "{dist}" in str(getattr(obj, "__module__", obj)) or "{dist}" in repr(obj)
    for name in [n for n in sys.modules if "{dist}" in n]:
        del sys.modules[name]
    sys.meta_path[:] = [f for f in sys.meta_path if not mine(f) and not mine(type(f))]
    sys.path_hooks[:] = [h for h in sys.path_hooks if not mine(h)]
    sys.path[:] = [p for p in sys.path if "{dist}" not in p]
    for key in [k for k in sys.path_importer_cache if "{dist}" in str(k)]:
        del sys.path_importer_cache[key]
    sys.argv[:] = [""]
    sys.orig_argv[:] = [sys.executable]
    sys.dont_write_bytecode = True
    fd_in, fd_out = {fd_in}, {fd_out}
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
    runner = loaded["orchestrator.verify.runner"]
    return runner.run(bundle["plan"], fd_in, fd_out, {{n: vars(m) for n, m in loaded.items()}})
raise SystemExit(main())
"""


@dataclass(frozen=True)
class ChildRun:
    returncode: int | None
    timed_out: bool
    wall_s: float
    stderr_tail: str
    report: proto.ChildReport

    @property
    def signal(self) -> int | None:
        return -self.returncode if self.returncode is not None and self.returncode < 0 else None


def bundle() -> list[tuple[str, str, str]]:
    """(module name, per-job random file name, source) of every child-side module."""
    return [
        (f"orchestrator.verify.{name}", f"<{secrets.token_hex(5)}>", (HERE / f"{name}.py").read_text())
        for name in BUNDLE
    ]


def child_env(home: Path, *, interpret: bool) -> dict[str, str]:
    env = {k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ}
    env["PATH"] = NEUTRAL_PATH
    env.setdefault("LANG", "C.UTF-8")
    env["HOME"] = str(home)  # private and empty: ~/.triton/cache lands here, never a shared cache
    env["OMP_NUM_THREADS"] = "1"
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    return env


class _Tail(threading.Thread):
    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd, self.data = fd, b""

    def run(self) -> None:
        while chunk := os.read(self.fd, 65536):
            self.data = (self.data + chunk)[-STDERR_TAIL:]


class _Reader(threading.Thread):
    def __init__(
        self, fd: int, limit: int, on_blob: Callable[[int, bytes, proto.ChildReport], None] | None
    ) -> None:
        super().__init__(daemon=True)
        self.fd, self.limit = fd, limit
        self.builder = proto.ReportBuilder(on_blob)

    def run(self) -> None:
        received = 0
        try:
            while (frame := proto.read_frame(self.fd, self.limit)) is not None:
                received += len(frame[1])
                if received > self.limit:
                    raise ValueError(f"the child sent more than {self.limit} bytes")
                self.builder.feed(*frame)
        except Exception as exc:  # a malformed stream, or a blob the parent could not judge
            self.builder.report.stream_error = self.builder.report.stream_error or str(exc)[:300]
            # Keep draining (and ignoring): a child blocked on a full pipe would only time out.
            try:
                while os.read(self.fd, 1 << 20):
                    pass
            except OSError:
                pass


class _Writer(threading.Thread):
    def __init__(self, fd: int, first: bytes, frames: Iterable[bytes]) -> None:
        super().__init__(daemon=True)
        self.fd, self.first, self.frames = fd, first, frames

    def run(self) -> None:
        try:
            proto.write_frame(self.fd, proto.JSON, self.first)
            for payload in self.frames:
                proto.write_frame(self.fd, proto.BLOB, payload)
        except OSError:
            pass  # the child is gone; its exit status tells the story
        finally:
            os.close(self.fd)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_child(
    plan: proto.Plan,
    frames: Iterable[bytes],
    *,
    interpret: bool,
    timeout_s: float,
    limit_bytes: int,
    on_blob: Callable[[int, bytes, proto.ChildReport], None] | None = None,
    python: str | None = None,
) -> ChildRun:
    """Run one child to completion (or timeout): send the plan and the input blobs, collect reports
    (``on_blob`` receives each trial's outputs as they arrive, in the reader thread)."""
    cwd, home = Path(tempfile.mkdtemp()), Path(tempfile.mkdtemp())
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            [python or sys.executable, "-I", "-"],
            cwd=cwd,
            env=child_env(home, interpret=interpret),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(in_r, out_w),
            start_new_session=True,  # own process group: killed whole on timeout and after exit
        )
        os.close(in_r)
        os.close(out_w)
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        out_tail, err_tail = _Tail(proc.stdout.fileno()), _Tail(proc.stderr.fileno())
        reader = _Reader(out_r, limit_bytes, on_blob)
        payload = json.dumps({"modules": bundle(), "plan": plan.to_json()}).encode()
        writer = _Writer(in_w, payload, frames)
        for thread in (out_tail, err_tail, reader, writer):
            thread.start()
        try:
            proc.stdin.write(BOOT.format(fd_in=in_r, fd_out=out_w, dist=DISTRIBUTION).encode())
            proc.stdin.close()
        except OSError:
            pass
        timed_out = False
        try:
            returncode: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            proc.wait()
            returncode = None
        finally:
            _kill_group(proc.pid)  # stray grandchildren of a finished child
        for thread in (reader, err_tail, out_tail):
            thread.join(timeout=10)
        writer.join(timeout=1)
        proc.stdout.close()
        proc.stderr.close()
    finally:
        os.close(out_r)
        shutil.rmtree(cwd, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)
    return ChildRun(
        returncode=returncode,
        timed_out=timed_out,
        wall_s=time.monotonic() - start,
        stderr_tail=err_tail.data.decode("utf-8", errors="replace"),
        report=reader.builder.report,
    )
