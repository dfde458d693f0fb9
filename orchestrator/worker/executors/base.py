"""What every executor implements, and the pieces they share (environment allow-list, output cap).

An executor runs one attempt of one job: the harness command over a read-only checkout of the exact
sha, writing its result record into ``outdir``. It never decides the verdict; the worker reads
``outdir/result.json`` afterwards and cross-checks it against the exit code. It describes itself: its
kind, its options model (what a pool may set, and its capabilities: ``gateway/client/jobs/executors.py``),
whether it can run jobs here at all (``unavailable``) and what confines them (``isolation()``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol, runtime_checkable

from gateway.client.jobs.executors import ExecutorOptions
from gateway.client.jobs.pools import DeviceType, JobLimits

# Variables copied from the worker's environment when set: loaders, toolkits, device runtimes.
# Nothing else crosses over: no tokens, no proxies, no KSWARM_* and no REDIS_URL.
PASSTHROUGH_ENV = (
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "ASCEND_HOME_PATH",
    "ASCEND_TOOLKIT_HOME",
    "ASCEND_OPP_PATH",
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
    "SLURM_CONF",
)

OnOutput = Callable[[str], None]


@dataclass
class ExecSpec:
    """One attempt of one job, in host paths (the docker executor mounts them at the same paths)."""

    job_id: str
    attempt: int
    argv: list[str]
    checkout: Path
    outdir: Path
    env: dict[str, str]
    timeout_s: float
    limits: JobLimits
    device: DeviceType = "cpu"
    devices: tuple[int, ...] = ()  # allocated device ids (none where the executor allocates them)
    device_count: int = 0  # what the job asked for (an executor that allocates devices gets it so)
    visible_var: str | None = None
    gres: str = "gpu"  # slurm (SlurmOptions.exec_fields)
    partition: str | None = None  # slurm
    image: str = "kswarm/empty"  # docker (DockerOptions.exec_fields)
    pool: str = "cpu"
    task_dir: Path | None = None  # the trusted task definition (read-only; outside the checkout)
    options: ExecutorOptions | None = None  # the pool's executor options (the executor's own model)

    @property
    def result_path(self) -> Path:
        return self.outdir / "result.json"


@dataclass
class ExecOutcome:
    """How the attempt ended; ``returncode`` None when it never finished (timeout, cancel, start failure)."""

    returncode: int | None
    timed_out: bool = False
    cancelled: bool = False
    output: str = ""
    truncated: bool = False
    wall_s: float = 0.0
    error: str | None = None  # the executor itself failed (could not start, lost the job)
    isolation: list[str] = field(default_factory=list)  # what was applied, for the log header
    detail: dict[str, str] = field(default_factory=dict)  # slurm job id, container id, ...


@runtime_checkable
class Executor(Protocol):
    """One kind of executor, registered by name in ``orchestrator/worker/executors/__init__.py``."""

    kind: str
    options_model: ClassVar[type[ExecutorOptions]]  # what a pool may set; the kind's capabilities

    @property
    def unavailable(self) -> str | None:
        """Why every job would be refused here (None: jobs can run); the worker says it once at start."""
        ...

    def isolation(self) -> list[str]:
        """What confines every job here, one item per protection (the job's log and its record)."""
        ...

    async def run(
        self, spec: ExecSpec, cancel: asyncio.Event, on_output: OnOutput | None = None
    ) -> ExecOutcome:
        """Run the attempt to its end, a timeout or ``cancel``; never raise for a failing job."""
        ...


@dataclass
class Prestarted:
    """A job's sandbox started before its job (``Prestarts``): the process, its output so far, and when."""

    process: asyncio.subprocess.Process
    cap: OutputCap
    reader: asyncio.Task[None]
    isolation: list[str]
    started: float  # time.monotonic()


@runtime_checkable
class Prestarts(Protocol):
    """An executor that can start a job's sandbox before the job exists (the worker's warm start,
    docs/jobs.md): ``prestart`` runs ``spec``'s command (the harness's ``--warm`` mode) in the sandbox
    ``spec`` describes; ``run_prestarted`` hands it one job's arguments on stdin and runs it to its end,
    with the job's ``spec`` (same dirs, its own timeout) and ``run``'s contract."""

    async def prestart(self, spec: ExecSpec) -> Prestarted | None:
        """The started sandbox, or None when this one cannot be started (the job then runs cold)."""
        ...

    async def run_prestarted(
        self,
        started: Prestarted,
        spec: ExecSpec,
        job_args: list[str],
        cancel: asyncio.Event,
        on_output: OnOutput | None = None,
    ) -> ExecOutcome | None:
        """None when the sandbox was gone before it took the job (nothing ran: run it cold)."""
        ...

    async def discard(self, started: Prestarted) -> None:
        """Stop a prestarted sandbox no job was given to."""
        ...


def job_env(outdir: Path, extra: dict[str, str] | None = None, python: str | None = None) -> dict[str, str]:
    """The allow-listed environment of a job: private HOME/TMPDIR/caches under ``outdir``."""
    py_bin = str(Path(python or sys.executable).parent)
    env = {k: os.environ[k] for k in PASSTHROUGH_ENV if os.environ.get(k)}
    for sub in ("home", "tmp", "cache"):
        (outdir / sub).mkdir(parents=True, exist_ok=True)
    env.update(
        PATH=f"{py_bin}:/usr/local/bin:/usr/bin:/bin",
        HOME=str(outdir / "home"),
        TMPDIR=str(outdir / "tmp"),
        XDG_CACHE_HOME=str(outdir / "cache"),
        TRITON_CACHE_DIR=str(outdir / "cache" / "triton"),
        LANG="C.UTF-8",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONNOUSERSITE="1",
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra or {})
    return env


class OutputCap:
    """Keeps the first ``limit`` bytes of a stream (and says so when it cut), passing each kept chunk on."""

    def __init__(self, limit: int, on_output: OnOutput | None = None) -> None:
        self.limit = limit
        self.on_output = on_output
        self._parts: list[bytes] = []
        self.size = 0
        self.truncated = False

    def attach(self, on_output: OnOutput | None) -> None:
        """Pass what comes from now on to ``on_output``, after what was kept so far."""
        self.on_output = on_output
        if on_output is not None and self._parts:
            on_output(b"".join(self._parts).decode("utf-8", errors="replace"))

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        room = self.limit - self.size
        if room <= 0:
            self.truncated = True
            return
        kept = chunk[:room]
        if len(kept) < len(chunk):
            self.truncated = True
        self._parts.append(kept)
        self.size += len(kept)
        if self.on_output is not None:
            self.on_output(kept.decode("utf-8", errors="replace"))

    def text(self) -> str:
        out = b"".join(self._parts).decode("utf-8", errors="replace")
        if self.truncated:
            out += f"\n[kswarm] output cut at {self.limit} bytes\n"
        return out


async def pump(stream: asyncio.StreamReader, cap: OutputCap) -> None:
    """Read a pipe to its end: kept up to the cap, the rest drained so the job never blocks on it."""
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return
        cap.feed(chunk)


def drop_planted_record(spec: ExecSpec) -> None:
    """Call once the job is gone. The worker reads the result record with its own rights: anything at
    its path but a regular file (a link to one of the worker's files, a fifo, a dir) is the job's doing
    and is removed, so that the worker finds no record (an error) instead of following it."""
    try:
        mode = os.lstat(spec.result_path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(spec.result_path, ignore_errors=True)
    elif not stat.S_ISREG(mode):
        spec.result_path.unlink(missing_ok=True)


def which(name: str) -> str | None:
    return shutil.which(name)
