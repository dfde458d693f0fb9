"""Parent side of the child process: a minimal allow-listed environment, its own session (so the whole
process group can be killed), a private work directory as cwd/HOME/TMPDIR, and a hard timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator.verify.protocol import ChildReport, read_status

# Package root, so the child can `-m orchestrator.verify.runner` without the project being installed.
PROJECT_ROOT = Path(__file__).resolve().parents[2]

# Variables copied from the parent when set: device selection, loader paths, and the OpenBLAS settings
# some processors here need to avoid wrong results or crashes.
PASSTHROUGH_ENV = (
    "PATH",
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_HOME",
    "ASCEND_RT_VISIBLE_DEVICES",
    "ASCEND_HOME_PATH",
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
)
STDERR_TAIL = 4000


@dataclass(frozen=True)
class ChildRun:
    returncode: int | None
    timed_out: bool
    wall_s: float
    stderr_tail: str
    report: ChildReport

    @property
    def signal(self) -> int | None:
        return -self.returncode if self.returncode is not None and self.returncode < 0 else None

    @property
    def clean(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.report.done


def child_env(work: Path, *, interpret: bool) -> dict[str, str]:
    env = {k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ}
    env.setdefault("PATH", "/usr/bin:/bin")
    for sub in ("home", "tmp", "triton-cache"):
        (work / sub).mkdir(exist_ok=True)
    env.update(
        HOME=str(work / "home"),
        TMPDIR=str(work / "tmp"),
        TRITON_CACHE_DIR=str(work / "triton-cache"),  # private: a shared cache could be poisoned
        PYTHONPATH=str(PROJECT_ROOT),
        PYTHONNOUSERSITE="1",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONHASHSEED="0",
        OMP_NUM_THREADS="1",
        LANG="C.UTF-8",
    )
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    return env


def _tail(path: Path) -> str:
    if not path.is_file():
        return ""
    with path.open("rb") as fh:
        fh.seek(max(0, path.stat().st_size - STDERR_TAIL))
        return fh.read().decode("utf-8", errors="replace")


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_child(
    plan_path: Path,
    status_path: Path,
    work: Path,
    *,
    interpret: bool,
    timeout_s: float,
    python: str | None = None,
) -> ChildRun:
    """Run the trial runner to completion (or timeout) and collect its exit status and report."""
    cmd = [python or sys.executable, "-s", "-m", "orchestrator.verify.runner", str(plan_path)]
    start = time.monotonic()
    stdout_path, stderr_path = work / "child.stdout", work / "child.stderr"
    with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
        proc = subprocess.Popen(
            cmd,
            cwd=work,
            env=child_env(work, interpret=interpret),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,  # own process group: killed whole on timeout and after exit
        )
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
    return ChildRun(
        returncode=returncode,
        timed_out=timed_out,
        wall_s=time.monotonic() - start,
        stderr_tail=_tail(stderr_path),
        report=read_status(status_path),
    )
