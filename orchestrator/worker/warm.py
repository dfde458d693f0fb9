"""Warm starts: a job's sandbox started before the job (docs/jobs.md, "Warm starts").

A job on the cpu interpreter spends most of its start-up importing torch and Triton, twice (the
harness and its fork server's zygote). On a pool whose jobs run the real harness there, with an
executor that ``Prestarts`` (local), the worker keeps one sandbox started ahead of the next job: in
its own job dir (``src/`` and ``task/`` empty, bound read-only; ``out/`` writable), the harness in
``--warm`` mode imports everything, starts its zygote and waits for a job's arguments on stdin.

A job that finds it alive takes it: the worker checks the job's commit out into its ``src/``, copies
the job's task into its ``task/``, seals both read-only and hands the arguments over; the job's time
runs from there. Nothing about the job exists before that (its seeds are drawn after the hand-over,
as in a cold start), one sandbox serves one job, and after each job the next one is started in a new
dir. A job that finds none (taken by another job, dead, another device selection) runs cold.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from gateway.client.jobs.models import Job
from gateway.client.jobs.pools import PoolConfig
from orchestrator.worker.executors import ExecSpec, Executor
from orchestrator.worker.executors.base import Prestarted, Prestarts, job_env
from orchestrator.worker.executors.local import make_writable
from orchestrator.worker.results import PROJECT_ROOT, warm_argv

log = logging.getLogger("kswarm.jobs.worker")
WARM_PREFIX = "jwarm-"


def owner_alive(path: Path) -> bool:
    """Whether the worker that made this warm dir (``jwarm-<pid>-<random>``) is still running."""
    try:
        pid = int(path.name.removeprefix(WARM_PREFIX).split("-")[0])
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:  # another user's live process
        return True
    return True


@dataclass
class WarmSandbox:
    """One started sandbox and its job dir, waiting for a job."""

    base: Path
    env: dict[str, str]
    started: Prestarted

    @property
    def task(self) -> Path:
        return self.base / "task"


class WarmStarts:
    """The one sandbox a worker keeps started for its pool's next job."""

    def __init__(self, workdir: Path, executor: Prestarts, pool: PoolConfig) -> None:
        self.workdir = workdir
        self.executor = executor
        self.pool = pool
        self.ready: WarmSandbox | None = None
        self._starting: asyncio.Task[None] | None = None
        self.closed = False

    @staticmethod
    def serves(pool: PoolConfig, executor: Executor) -> bool:
        """Pools whose jobs run the real harness on the cpu interpreter, with no device selection."""
        return (
            isinstance(executor, Prestarts)
            and executor.unavailable is None
            and pool.device == "cpu"
            and pool.harness_pool_name() == "cpu"
            and not pool.harness_command
            and pool.visible_devices_var is None
        )

    def refill(self) -> None:
        """Start the next sandbox (in the background) unless one is ready or on its way."""
        if self.closed or self.ready is not None or (self._starting and not self._starting.done()):
            return
        self._starting = asyncio.create_task(self._start())

    async def take(self, job: Job, env: dict[str, str]) -> WarmSandbox | None:
        """The ready sandbox for ``job`` (its device variables ``env``), or None: then it runs cold.
        One being started is waited for (spawning it is milliseconds; its imports go on inside)."""
        if env or job.timeout_s > self.pool.timeout_s:
            return None
        if self.ready is None and self._starting is not None and not self._starting.done():
            await asyncio.gather(self._starting, return_exceptions=True)
        ready, self.ready = self.ready, None
        if ready is None:
            return None
        if ready.started.process.returncode is not None:  # died waiting: say why, start another
            log.warning(
                "warm sandbox %s exited before a job came:\n%s", ready.base.name, ready.started.cap.text()
            )
            _remove(ready.base)
            self.refill()
            return None
        return ready

    async def discard(self, sandbox: WarmSandbox) -> None:
        """After its job: stop it if the job never reached it (a checkout that failed, say)."""
        if sandbox.started.process.returncode is None:
            await self.executor.discard(sandbox.started)

    async def close(self) -> None:
        self.closed = True
        if self._starting is not None:
            await asyncio.gather(self._starting, return_exceptions=True)
        if self.ready is not None:
            await self.executor.discard(self.ready.started)
            _remove(self.ready.base)
            self.ready = None

    async def _start(self) -> None:
        # The worker's pid in the name: another worker's start-up sweep of this work dir leaves it be.
        base = self.workdir / f"{WARM_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        for sub in ("src", "task", "out"):
            (base / sub).mkdir(parents=True)
        env = job_env(base / "out", {"PYTHONPATH": str(PROJECT_ROOT)})
        spec = ExecSpec(
            job_id=base.name,
            attempt=0,
            argv=warm_argv(self.pool),
            checkout=base / "src",
            outdir=base / "out",
            env=env,
            # The pool's default limit bounds its CPU seconds (jobs that ask for more run cold).
            timeout_s=self.pool.timeout_s,
            limits=self.pool.limits,
            device=self.pool.device,
            pool=self.pool.name,
            task_dir=base / "task",
            **self.pool.executor.exec_fields(self.pool.device),
        )
        try:
            started = await self.executor.prestart(spec)
        except Exception:  # a worker bug must not take the worker down: jobs run cold
            log.exception("warm sandbox for pool %s could not start", self.pool.name)
            started = None
        if started is None or self.closed:
            if started is not None:
                await self.executor.discard(started)
            _remove(base)
            return
        self.ready = WarmSandbox(base, env, started)


def _remove(base: Path) -> None:
    make_writable(base)
    shutil.rmtree(base, ignore_errors=True)
