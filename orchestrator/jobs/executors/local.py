"""The local executor: the harness as a subprocess on this machine, confined as far as the platform allows.

Applied (each recorded in the job log's header):

- **network**: a new, empty network namespace (``unshare --net``; loopback is down, so even
  127.0.0.1 is unreachable) when we may create one (root, or unprivileged user namespaces);
- **processes**: a new PID namespace with its own /proc (``--pid --fork --kill-child --mount-proc``):
  the job cannot see or signal the worker. The namespace's init is a root shell that waits for the job
  (a uid change would clear its parent-death signal), so when the worker dies, even by SIGKILL, the
  init is killed and the kernel kills everything in the namespace;
- **user**: when the worker is root, the job runs as ``nobody`` (``setpriv``), so the checkout (owned by
  root, mode a-w) is read-only to it and the worker's files are out of reach; directories ``nobody``
  cannot enter on the way to the interpreter or the project are covered with an empty tmpfs in the
  job's private mount namespace, binding back only what it needs (``confine.py``);
- **limits**: rlimits on address space, CPU seconds, open files, file size, core dumps (and processes
  when it runs as its own uid); a wall-clock timeout that kills the whole tree; output capped;
- **environment**: only the allow-list of ``base.job_env``.

Not isolated: the filesystem is the host's (readable where ``nobody`` may read), there is no cgroup
(memory is bounded by the address-space limit, not by RSS), and without root the job runs as the
worker's user with network isolation only where unprivileged namespaces are allowed (and without a PID
namespace, a killed worker's grandchildren may outlive it). When no network namespace can be made,
the job log says ``network: NOT isolated`` and ``network_isolated`` is False.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import resource
import shlex
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from orchestrator.jobs.executors.base import ExecOutcome, ExecSpec, OnOutput, OutputCap, pump, which
from orchestrator.jobs.executors.confine import hide_plan, mount_script, needed_paths

NOBODY = 65534
_PR_SET_PDEATHSIG = 1


def _probe(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


class LocalExecutor:
    kind = "local"

    def __init__(self, isolate: bool = True, run_as: int | None = None) -> None:
        """``isolate=False`` only for tests of the executor plumbing; ``run_as`` overrides the uid."""
        self.isolate = isolate
        unshare = which("unshare")
        self.netns = bool(isolate and unshare and _probe([unshare, "--net", "--", "true"]))
        self.pidns = bool(
            self.netns and _probe([unshare, "--pid", "--fork", "--kill-child", "--mount-proc", "--", "true"])
        )
        self.unshare = unshare or "unshare"
        self.setpriv = which("setpriv")
        if run_as is None and isolate and os.geteuid() == 0 and self.setpriv:
            run_as = NOBODY
        self.run_as = run_as
        for stale in Path(tempfile.gettempdir()).glob("ks-stage-*"):  # left by workers killed mid-start
            with contextlib.suppress(OSError):
                if time.time() - stale.stat().st_mtime > 3600:
                    _remove_staging(stale)

    @property
    def network_isolated(self) -> bool:
        return self.netns

    def isolation(self) -> list[str]:
        notes = ["network: namespace (no interfaces up)" if self.netns else "network: NOT isolated"]
        notes.append("pid: namespace" if self.pidns else "pid: shared")
        notes.append(f"uid: {self.run_as}" if self.run_as is not None else f"uid: {os.geteuid()} (worker's)")
        return notes

    def notes(self, spec: ExecSpec) -> list[str]:
        plan = self.hide_plan(spec)
        hidden = [f"hidden: {b} (bound back: {', '.join(map(str, under))})" for b, under in plan.items()]
        return self.isolation() + hidden

    def hide_plan(self, spec: ExecSpec) -> dict[Path, list[Path]]:
        """Directories to cover (with what to bind back) so that ``nobody`` reaches what it runs."""
        if self.run_as is None or not self.pidns:
            return {}
        return hide_plan(needed_paths([spec.checkout, spec.outdir]))

    def command(self, spec: ExecSpec, staging: Path | None = None) -> list[str]:
        """The full command line: namespace and user wrappers around the harness command.

        ``staging`` is an empty root-only directory outside everything the plan covers."""
        argv = list(spec.argv)
        if self.run_as is not None and self.setpriv:
            argv = [
                self.setpriv,
                f"--reuid={self.run_as}",
                f"--regid={self.run_as}",
                "--clear-groups",
                "--no-new-privs",
                "--",
                *argv,
            ]
            if self.pidns:
                # The namespace's init stays a root shell that *waits* for the job: a uid change would
                # clear the parent-death signal that kills the namespace when the worker dies.
                plan = self.hide_plan(spec)
                mounts = mount_script(plan, shlex.quote(str(staging))) + "\n" if plan and staging else ""
                argv = ["/bin/sh", "-c", mounts + '"$@"\nexit $?', "kswarm-init", *argv]
        if self.netns:
            ns = ["--net"] + (["--pid", "--fork", "--kill-child", "--mount-proc"] if self.pidns else [])
            argv = [self.unshare, *ns, "--", *argv]
        return argv

    def prepare(self, spec: ExecSpec) -> None:
        """Hand the output dir to the job's uid; make the checkout read-only."""
        for path in [spec.checkout, *spec.checkout.rglob("*")]:
            if path.is_symlink():
                continue
            mode = path.stat().st_mode
            path.chmod(mode & ~0o222)
        if self.run_as is not None:
            for path in [spec.outdir, *spec.outdir.rglob("*")]:
                os.chown(path, self.run_as, self.run_as, follow_symlinks=False)

    def _preexec(self, spec: ExecSpec) -> None:
        """In the child before exec: die with the worker, own session, rlimits."""
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        os.setsid()
        limits = spec.limits
        cpu = limits.cpu_time_s or int(spec.timeout_s * 2) + 30
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.nofile, limits.nofile))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if self.run_as is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (limits.nproc, limits.nproc))

    async def run(
        self, spec: ExecSpec, cancel: asyncio.Event, on_output: OnOutput | None = None
    ) -> ExecOutcome:
        cap = OutputCap(spec.limits.output_bytes, on_output)
        started = time.monotonic()
        staging = Path(tempfile.mkdtemp(prefix="ks-stage-")) if self.hide_plan(spec) else None
        try:
            self.prepare(spec)
            proc = await asyncio.create_subprocess_exec(
                *self.command(spec, staging),
                cwd=str(spec.outdir),
                env=spec.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                preexec_fn=lambda: self._preexec(spec),
            )
        except OSError as exc:
            _remove_staging(staging)
            return ExecOutcome(
                returncode=None, error=f"cannot start the job: {exc}", isolation=self.notes(spec)
            )
        assert proc.stdout is not None
        reader = asyncio.create_task(pump(proc.stdout, cap))
        waiter = asyncio.create_task(proc.wait())
        stopper = asyncio.create_task(cancel.wait())
        done, _ = await asyncio.wait({waiter, stopper}, timeout=spec.timeout_s, return_when="FIRST_COMPLETED")
        timed_out = not done
        cancelled = stopper in done and waiter not in done
        if waiter not in done:
            _kill_tree(proc.pid)
            await waiter
        stopper.cancel()
        _kill_tree(proc.pid)  # stragglers of a finished job (no-op inside a PID namespace)
        try:
            await asyncio.wait_for(reader, 10)
        except TimeoutError:  # a stray process outside the namespace still holds the pipe
            reader.cancel()
        _remove_staging(staging)
        return ExecOutcome(
            returncode=None if (timed_out or cancelled) else proc.returncode,
            timed_out=timed_out,
            cancelled=cancelled,
            output=cap.text(),
            truncated=cap.truncated,
            wall_s=time.monotonic() - started,
            isolation=self.notes(spec),
        )


def _kill_tree(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _remove_staging(staging: Path | None) -> None:
    """Empty slot dirs once the namespace (and its mounts) is gone; never follows into a mount."""
    if staging is None:
        return
    for slot in staging.iterdir():
        try:
            slot.rmdir()
        except OSError:
            pass
    try:
        staging.rmdir()
    except OSError:
        pass


def make_writable(path: Path) -> None:
    """Undo ``prepare``'s read-only bits so the worker can delete the checkout."""
    for p in [path, *path.rglob("*")] if path.exists() else []:
        if not p.is_symlink():
            p.chmod(p.stat().st_mode | 0o200)
