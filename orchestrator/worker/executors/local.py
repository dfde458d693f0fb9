"""The local executor: the harness as a subprocess on this machine, inside the one sandbox.

Every job runs through ``python -m orchestrator.sandbox`` (the same sandbox as the agents'; see
docs/sandbox.md): its own mount, pid, network and IPC namespaces around a minimal root that holds the
system dirs, the Python installation, the project, the paths the job's command line and toolkit
variables name (all read-only), its checkout (read-only) and its output dir (the one writable place),
fresh tmpfs ``/tmp``, ``/var/tmp``, ``/run``, ``/dev/shm``, no network interface up, a seccomp filter.
Other jobs' dirs are not in its root at all (the worker's work dir is hidden should a bind show it).
As root the job runs as ``nobody``; without root as the worker's uid in a user namespace that maps
nothing else. When neither works, every job is refused with the reason (``unavailable``): never run
less confined. The protections in effect are the first line of the job's log and its ``isolation``.

Not confined: CPU and memory by cgroup (rlimits bound address space, CPU seconds, file size, open files
and processes); device nodes of a CUDA pool are all bound (``CUDA_VISIBLE_DEVICES`` picks the job's).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import signal
import sys
import time
from glob import glob
from pathlib import Path
from typing import ClassVar

from gateway.client.home import kswarm_home
from gateway.client.jobs.executors import ExecutorOptions, LocalOptions
from orchestrator.sandbox.mounts import under
from orchestrator.sandbox.plan import (
    NOBODY,
    PRIVATE_TMPFS,
    PROJECT_ROOT,
    SETUP_FAILED,
    SandboxPlan,
    interpreter_paths,
)
from orchestrator.sandbox.probe import launcher_env, sandbox_unavailable
from orchestrator.sandbox.seccomp import SUMMARY
from orchestrator.worker.executors.base import (
    ExecOutcome,
    ExecSpec,
    OnOutput,
    OutputCap,
    Prestarted,
    drop_planted_record,
    pump,
)

log = logging.getLogger("kswarm.jobs.worker")

# Variables of the job's environment that name toolkit paths the job must read (bound read-only).
PATH_VARIABLES: tuple[str, ...] = (
    "PYTHONPATH",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "ASCEND_HOME_PATH",
    "ASCEND_TOOLKIT_HOME",
    "ASCEND_OPP_PATH",
)
CUDA_DEVICES = ("/dev/nvidia*", "/dev/nvidia-caps")
ASCEND_CONTROL_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")


def job_root(spec: ExecSpec) -> Path:
    """The job's own dir: the nearest dir holding its checkout and its output dir."""
    return Path(os.path.commonpath([spec.checkout.resolve(), spec.outdir.resolve()]))


def readable_paths(spec: ExecSpec) -> list[str]:
    """What the job reads besides its checkout: interpreter, project, and the existing absolute paths its
    command line and toolkit variables name -- never a path that holds its own dir, the private tmp
    dirs or everything (``/``), which would show the host (and other jobs) through the bind."""
    named = [a for a in spec.argv if a.startswith("/")]
    for var in PATH_VARIABLES:
        named += [p for p in spec.env.get(var, "").split(os.pathsep) if p.startswith("/")]
    own = str(job_root(spec))
    paths = {str(p) for p in [PROJECT_ROOT, *interpreter_paths()]}
    for raw in named:
        path = os.path.realpath(raw)
        if not os.path.exists(path) or under(path, own) or under(own, path):
            continue
        if any(under(tmp, path) for tmp in PRIVATE_TMPFS):
            continue
        paths.add(path)
    return sorted(p for p in paths if not any(p != q and under(p, q) for q in paths))


def own_task_dir(spec: ExecSpec) -> list[str]:
    """The task's copy in the job's own dir (a warm start's: docs/jobs.md), bound read-only like the
    checkout; a task dir elsewhere (the task cache) is a readable path its command line names."""
    if spec.task_dir is None:
        return []
    task = str(spec.task_dir.resolve())
    return [task] if under(task, str(job_root(spec))) else []


def device_nodes(spec: ExecSpec) -> list[str]:
    if spec.device == "cuda":
        return sorted({p for pattern in CUDA_DEVICES for p in glob(pattern)})
    if spec.device == "npu":
        own = [f"/dev/davinci{d}" for d in spec.devices]
        return [p for p in [*own, *ASCEND_CONTROL_DEVICES] if os.path.exists(p)]
    return []


def job_plan(spec: ExecSpec, run_as: int | None, parent_pid: int | None = None) -> SandboxPlan:
    """The sandbox of one job attempt (also what a batch script on a cluster node would run)."""
    limits = spec.limits
    cpu = limits.cpu_time_s or int(spec.timeout_s * 2) + 30
    return SandboxPlan(
        argv=list(spec.argv),
        env=dict(spec.env),
        cwd=str(spec.outdir.resolve()),
        ro=[*readable_paths(spec), str(spec.checkout.resolve()), *own_task_dir(spec)],
        rw=[str(spec.outdir.resolve())],
        # Every job's dirs (the worker's work dir) and kswarm's state, should a bind show them.
        hide=[str(job_root(spec).parent), str(kswarm_home())],
        devices=device_nodes(spec),
        run_as=run_as,
        loopback=False,
        pids=limits.nproc,
        parent_pid=parent_pid,
        rlimits={"as": limits.memory_bytes, "cpu": cpu, "nofile": limits.nofile, "fsize": limits.file_bytes},
    )


class LocalExecutor:
    kind = "local"
    options_model: ClassVar[type[ExecutorOptions]] = LocalOptions

    def __init__(self, run_as: int | None = None) -> None:
        """``run_as``: the jobs' uid when the worker is root (default ``nobody``); ignored otherwise."""
        self.root = os.geteuid() == 0
        self.run_as = (run_as if run_as is not None else NOBODY) if self.root else None

    @functools.cached_property
    def unavailable(self) -> str | None:
        """Why no job can be sandboxed here (None: they can); probed once, by building a sandbox."""
        return sandbox_unavailable(self.run_as)

    def plan(self, spec: ExecSpec) -> SandboxPlan:
        return job_plan(spec, self.run_as, parent_pid=os.getpid())

    def isolation(self) -> list[str]:
        """The protections every job gets here, one per line of the log header."""
        if self.unavailable is not None:
            return [f"sandbox: UNAVAILABLE, jobs refused ({self.unavailable})"]
        if self.run_as is not None:
            who = f"user: {self.run_as} (the job's own uid, no groups)"
        else:
            who = f"user namespace (the worker's uid {os.getuid()} inside, nothing else mapped)"
        return [
            "network: namespace (no interfaces up)",
            "mount namespace: minimal root (system, Python, project read-only), checkout read-only, "
            "output dir the only writable path, private /tmp /var/tmp /run /dev/shm, other jobs invisible",
            "pid namespace (own /proc; dies with the worker)",
            "ipc namespace",
            who,
            f"seccomp: {SUMMARY}; no_new_privs",
            "limits: rlimits (address space, CPU s, files, file size, processes); no cgroup",
        ]

    def prepare(self, spec: ExecSpec) -> None:
        """Make the checkout read-only on disk too; hand the output dir to the job's uid."""
        self.seal(spec)
        self.hand_out(spec)

    @staticmethod
    def seal(spec: ExecSpec) -> None:
        for top in [spec.checkout, *map(Path, own_task_dir(spec))]:
            for path in [top, *top.rglob("*")]:
                if path.is_symlink():
                    continue
                mode = path.stat().st_mode
                path.chmod(mode & ~0o222)

    def hand_out(self, spec: ExecSpec) -> None:
        if self.run_as is not None:
            for path in [spec.outdir, *spec.outdir.rglob("*")]:
                os.chown(path, self.run_as, self.run_as, follow_symlinks=False)

    async def run(
        self, spec: ExecSpec, cancel: asyncio.Event, on_output: OnOutput | None = None
    ) -> ExecOutcome:
        started = await self._start(spec, on_output, stdin=False)
        if isinstance(started, ExecOutcome):
            return started
        return await self._wait(started, spec, cancel)

    async def prestart(self, spec: ExecSpec) -> Prestarted | None:
        started = await self._start(spec, None, stdin=True)
        return started if isinstance(started, Prestarted) else None

    async def run_prestarted(
        self,
        started: Prestarted,
        spec: ExecSpec,
        job_args: list[str],
        cancel: asyncio.Event,
        on_output: OnOutput | None = None,
    ) -> ExecOutcome | None:
        """None when the sandbox was gone before it took the job (nothing of the job ran)."""
        proc = started.process
        try:
            if proc.returncode is not None or proc.stdin is None:
                raise ConnectionResetError("it has exited")
            self.prepare(spec)  # the checkout filled in since: read-only too
            proc.stdin.write(json.dumps(job_args).encode() + b"\n")
            await proc.stdin.drain()
            proc.stdin.close()
        except (OSError, ConnectionError) as exc:
            log.warning("job %s: the warm sandbox could not take it (%s); running it cold", spec.job_id, exc)
            await self.discard(started)
            return None
        # How long it waited says how idle this worker was: the worker's log, not the submitter's.
        log.info(
            "job %s: warm sandbox started %.1f s before it", spec.job_id, time.monotonic() - started.started
        )
        started.cap.attach(on_output)
        name = spec.checkout.parent.name.rpartition("-")[2]  # its random part
        started.cap.feed(f"[kswarm] warm start: sandbox {name}, started before the job\n".encode())
        started.started = time.monotonic()  # the job's time runs from here
        return await self._wait(started, spec, cancel)

    async def discard(self, started: Prestarted) -> None:
        _kill(started.process.pid)
        await started.process.wait()
        started.reader.cancel()

    async def _start(
        self, spec: ExecSpec, on_output: OnOutput | None, *, stdin: bool
    ) -> Prestarted | ExecOutcome:
        cap = OutputCap(spec.limits.output_bytes, on_output)
        notes = await asyncio.to_thread(self.isolation)  # the first call probes
        if self.unavailable is not None:
            why = f"job refused: no sandbox can be built here: {self.unavailable}"
            return ExecOutcome(returncode=None, error=why, isolation=notes)
        cap.feed(f"[kswarm] sandbox: {'; '.join(notes)}\n".encode())
        try:
            if stdin:  # its dirs are filled when the job comes (run_prestarted seals them then)
                self.hand_out(spec)
            else:
                self.prepare(spec)
            proc = await asyncio.create_subprocess_exec(
                *self.command(spec),
                cwd="/",
                env=launcher_env(),  # the launcher's (init's): the job's own is in the plan
                stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            return ExecOutcome(returncode=None, error=f"cannot start the job: {exc}", isolation=notes)
        assert proc.stdout is not None
        reader = asyncio.create_task(pump(proc.stdout, cap))
        return Prestarted(proc, cap, reader, notes, time.monotonic())

    async def _wait(self, started: Prestarted, spec: ExecSpec, cancel: asyncio.Event) -> ExecOutcome:
        proc, cap, reader, notes = started.process, started.cap, started.reader, started.isolation
        waiter = asyncio.create_task(proc.wait())
        stopper = asyncio.create_task(cancel.wait())
        done, _ = await asyncio.wait({waiter, stopper}, timeout=spec.timeout_s, return_when="FIRST_COMPLETED")
        timed_out = not done
        cancelled = stopper in done and waiter not in done
        if waiter not in done:
            _kill(proc.pid)  # the launcher: its init dies with it, and the pid namespace with init
            await waiter
        stopper.cancel()
        try:
            await asyncio.wait_for(reader, 10)
        except TimeoutError:  # cannot happen: nothing of the job outlives its pid namespace
            reader.cancel()
        drop_planted_record(spec)
        error = None
        if proc.returncode == SETUP_FAILED and not (timed_out or cancelled):
            error = setup_failure(cap.text())
        return ExecOutcome(
            returncode=None if (timed_out or cancelled) else proc.returncode,
            timed_out=timed_out,
            cancelled=cancelled,
            output=cap.text(),
            truncated=cap.truncated,
            wall_s=time.monotonic() - started.started,
            error=error,
            isolation=notes,
        )

    def command(self, spec: ExecSpec) -> list[str]:
        return [sys.executable, "-m", "orchestrator.sandbox", self.plan(spec).model_dump_json()]


def setup_failure(output: str) -> str | None:
    """The sandbox's own one-line reason, when it (not the job) failed."""
    for line in reversed(output.splitlines()):
        if line.startswith("kswarm sandbox: "):
            return f"the job's sandbox could not be built: {line.removeprefix('kswarm sandbox: ')}"
    return None


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def make_writable(path: Path) -> None:
    """Undo ``prepare``'s read-only bits so the worker can delete the checkout."""
    for p in [path, *path.rglob("*")] if path.exists() else []:
        if not p.is_symlink():
            p.chmod(p.stat().st_mode | 0o200)
