"""A job worker: ``python -m orchestrator.worker --pool cpu --gateway URL --token WORKER_TOKEN``.

It serves one node of one pool (``--node``, default the pool's first; where the pool's executor
allocates devices itself, as Slurm does, the one worker serves the whole pool). It takes jobs from the
gateway (the pool's streams, fair order, a long poll), allocates their devices on its node, checks out
the exact sha, runs the executor, heartbeats while it runs (which keeps the job from being reclaimed,
streams its log and picks up cancellations) and records the result with one ``finish`` call. Everything
that follows (the verification evidence the gate binds to the kernel, the commit statuses, the
submitter's notice) the gateway does itself, so a worker that dies right after ``finish`` loses nothing.
A worker killed mid-job leaves the job running; the gateway reclaims and retries it after
``claim_idle_s`` of silence.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path

from gateway.client import AsyncGatewayClient, GatewayCallError, GatewayTarget
from gateway.client.jobs import JobsClient
from gateway.client.jobs.models import (
    Assignment,
    FinishRequest,
    HeartbeatRequest,
    JobState,
    TakeRequest,
)
from gateway.client.jobs.pools import PoolConfig
from orchestrator.worker.allocator import Allocation, DeviceAllocator
from orchestrator.worker.checkout import CheckoutError, checkout, inside, sha256_of
from orchestrator.worker.executors import ExecSpec, Executor, make_executor
from orchestrator.worker.executors.base import Prestarts, job_env
from orchestrator.worker.executors.local import make_writable
from orchestrator.worker.results import (
    PROJECT_ROOT,
    Verdict,
    harness_args,
    harness_argv,
    interpret,
    write_counterexample,
)
from orchestrator.worker.tasks import TaskCache, TaskUnavailable
from orchestrator.worker.warm import WARM_PREFIX, WarmStarts, owner_alive

log = logging.getLogger("kswarm.jobs.worker")


@dataclass
class Running:
    assignment: Assignment
    allocation: Allocation
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    lost: bool = False
    pending_log: list[str] = field(default_factory=list)

    def take_log(self) -> str:
        text = "".join(self.pending_log)
        self.pending_log.clear()
        return text


class Worker:
    def __init__(
        self,
        pool: str,
        gateway: str,
        token: str,
        node: str | None = None,
        workdir: Path | None = None,
        executor: Executor | None = None,
        heartbeat_s: float = 2.0,
        take_wait_s: float = 2.0,
        clone_url: str = "{gateway}/git/{repo}.git",
        keep: bool = False,
        warm: bool = True,
    ) -> None:
        """``warm``: keep a sandbox started ahead of the next job where the pool allows (warm.py)."""
        self.pool_name = pool
        self.gateway = gateway.rstrip("/")
        self.token = token
        self.node_name = node
        self.workdir = workdir or Path(tempfile.gettempdir()) / "kswarm-jobs"
        self.executor = executor
        self.heartbeat_s = heartbeat_s
        self.take_wait_s = take_wait_s
        self.clone_url = clone_url
        self.keep = keep
        self.warm_starts = warm
        self.warm: WarmStarts | None = None
        self.instance = f"{socket.gethostname()[:24]}-{os.getpid()}-{secrets.token_hex(2)}"
        self.running: dict[str, Running] = {}
        self.tasks = TaskCache(self.workdir / "tasks")
        self._freed = asyncio.Event()

    async def run(self, stop: asyncio.Event | None = None) -> None:
        stop = stop or asyncio.Event()
        target = GatewayTarget(token=self.token, url=self.gateway, timeout=60)
        async with AsyncGatewayClient(target) as gateway:
            client = JobsClient(gateway)
            pool = await client.pool_config(self.pool_name)
            executor = self.executor or make_executor(pool.executor)
            refused = executor.unavailable  # the local executor probes its sandbox once
            if refused:
                log.error(
                    "pool %s: every job will be refused by the %s executor: %s",
                    pool.name,
                    executor.kind,
                    refused,
                )
            # An executor that allocates devices itself (Slurm) gets the whole pool: we only count what
            # we have handed it. Otherwise we serve one node and allocate its devices.
            allocates = pool.executor.allocates_devices
            node_name = pool.served_node(self.node_name)
            devices = (
                range(sum(len(n.devices) for n in pool.nodes)) if allocates else pool.node(node_name).devices
            )
            allocator = DeviceAllocator(node_name, devices)
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.workdir.chmod(0o711)  # jobs may run as another uid: they must reach their dirs
            self._sweep()
            log.info(
                "worker %s serves pool %s node %s (%s)", self.instance, pool.name, node_name, executor.kind
            )
            if self.warm_starts and isinstance(executor, Prestarts) and WarmStarts.serves(pool, executor):
                self.warm = WarmStarts(self.workdir, executor, pool)
                self.warm.refill()
            beats = asyncio.create_task(self._heartbeats(client, stop))
            tasks: set[asyncio.Task[None]] = set()
            try:
                while not stop.is_set():
                    if allocator.free_count() == 0 and allocator.devices:
                        self._freed.clear()
                        await _first(self._freed.wait(), stop.wait())
                        continue
                    free_ids = [] if allocates else [str(d) for d in allocator.free_ids()]
                    request = TakeRequest(
                        instance=self.instance,
                        node=node_name,
                        free_devices=allocator.free_count(),
                        free_ids=free_ids,
                        wait_s=self.take_wait_s,
                    )
                    try:
                        assignment = await client.take(pool.name, request)
                    except GatewayCallError as exc:
                        log.warning("take: %s", exc)
                        await _first(asyncio.sleep(1.0), stop.wait())
                        continue
                    if assignment is None:
                        continue
                    allocation = allocator.allocate(assignment.job.id, assignment.job.devices)
                    if allocation is None:  # cannot happen: the gateway saw our free count
                        allocation = Allocation(assignment.job.id, node_name, ())
                    running = Running(assignment, allocation)
                    self.running[assignment.job.id] = running
                    task = asyncio.create_task(self._job(pool, executor, client, running))
                    tasks.add(task)

                    def done(t: asyncio.Task[None], r: Running = running) -> None:
                        self._done(t, r, allocator, tasks)

                    task.add_done_callback(done)
            finally:
                if tasks:
                    await asyncio.wait(tasks)
                beats.cancel()
                if self.warm is not None:
                    await self.warm.close()

    def _sweep(self, older_than_s: float = 2 * 86400) -> None:
        """Remove job dirs that killed workers left behind (old enough that no job can still run)."""
        for stale in self.workdir.glob("j*-*"):
            try:
                if stale.name.startswith(WARM_PREFIX):  # idle for days, maybe: its worker says
                    gone = not owner_alive(stale)
                else:
                    gone = time.time() - stale.stat().st_mtime > older_than_s
                if gone:
                    make_writable(stale)
                    shutil.rmtree(stale, ignore_errors=True)
            except OSError:
                continue

    def _done(
        self,
        task: asyncio.Task[None],
        running: Running,
        allocator: DeviceAllocator,
        tasks: set[asyncio.Task[None]],
    ) -> None:
        tasks.discard(task)
        allocator.release(running.assignment.job.id)
        self.running.pop(running.assignment.job.id, None)
        self._freed.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("job %s crashed the worker task", running.assignment.job.id, exc_info=task.exception())

    async def _heartbeats(self, client: JobsClient, stop: asyncio.Event) -> None:
        while True:
            for job_id, running in list(self.running.items()):
                try:
                    reply = await client.heartbeat(
                        job_id,
                        HeartbeatRequest(
                            instance=self.instance, attempt=running.assignment.attempt, log=running.take_log()
                        ),
                    )
                except GatewayCallError as exc:
                    log.warning("heartbeat %s: %s", job_id, exc)
                    continue
                if not reply.ok:  # reclaimed or final elsewhere: stop, report nothing
                    running.lost = True
                    running.cancel.set()
                elif reply.cancel:
                    running.cancel.set()
            await asyncio.sleep(self.heartbeat_s)

    async def _job(self, pool: PoolConfig, executor: Executor, client: JobsClient, running: Running) -> None:
        job, attempt = running.assignment.job, running.assignment.attempt
        allocates = pool.executor.allocates_devices  # then the executor picks and exports them
        visible = None if allocates else pool.visible_devices_var
        devices_env = running.allocation.env(visible)
        warm = await self.warm.take(job, devices_env) if self.warm is not None else None
        base = warm.base if warm is not None else self.workdir / f"{job.id}-{attempt}"
        src, out = base / "src", base / "out"
        devices = running.allocation.devices
        header = (
            f"[kswarm] job {job.id} attempt {attempt} on {self.instance} node {running.allocation.node} "
            f"devices {list(devices) or '-'} executor {executor.kind}\n"
        )
        running.pending_log.append(header)
        verdict: Verdict
        try:
            if warm is None:
                shutil.rmtree(base, ignore_errors=True)
                out.mkdir(parents=True)
            url = self.clone_url.format(gateway=self.gateway, repo=job.repo)
            await checkout(url, job.sha, src, self.token)
            candidate = inside(src, job.kernel)
            # The task is main's (or the operator-local pool's), never the checkout's: the PR's head
            # may carry its own tasks/; nothing of it is read.
            task_dir, task_source = await self.tasks.for_job(pool, job, client.gateway)
            if warm is not None:  # the warm sandbox sees only its own dir: the task goes in there
                shutil.copytree(task_dir, warm.task, symlinks=True, dirs_exist_ok=True)
                task_dir = warm.task
            running.pending_log.append(
                f"[kswarm] task {job.task}: {task_source['source']} "
                f"{task_source.get('repo') or ''}@{(task_source.get('commit') or '-')[:12]} "
                f"blob {task_source['blob_sha'][:12]}\n"
            )
            result_path = out / "result.json"
            counterexample = write_counterexample(job, out)
            env = (
                warm.env
                if warm is not None
                else job_env(out, {"PYTHONPATH": str(PROJECT_ROOT), **devices_env})
            )
            spec = ExecSpec(
                job_id=job.id,
                attempt=attempt,
                argv=harness_argv(pool, job, task_dir, candidate, result_path, counterexample=counterexample),
                checkout=src,
                outdir=out,
                env=env,
                timeout_s=job.timeout_s,
                limits=pool.limits,
                device=pool.device,
                devices=() if allocates else devices,
                device_count=job.devices,
                visible_var=pool.visible_devices_var,
                pool=pool.name,
                task_dir=task_dir,
                **pool.executor.exec_fields(pool.device),
            )
            outcome = None
            if warm is not None and isinstance(executor, Prestarts):
                args = harness_args(pool, job, task_dir, candidate, result_path, counterexample)
                outcome = await executor.run_prestarted(
                    warm.started, spec, args, running.cancel, running.pending_log.append
                )
            if outcome is None:
                outcome = await executor.run(spec, running.cancel, running.pending_log.append)
            running.pending_log.append(f"[kswarm] isolation: {', '.join(outcome.isolation)}\n")
            verdict = interpret(outcome, result_path, sha256_of(candidate), job.timeout_s)
            if verdict.result is not None:
                verdict.result["task_source"] = task_source  # the task this verdict was judged by
        except (CheckoutError, TaskUnavailable) as exc:
            verdict = Verdict(JobState.error, "error", str(exc), None, None)
        except Exception as exc:  # a broken pool config or worker bug: report it, do not burn attempts
            log.exception("job %s: worker failure", job.id)
            why = f"worker failure: {type(exc).__name__}: {exc}"
            verdict = Verdict(JobState.error, "error", why, None, None)
        finally:
            if warm is not None and self.warm is not None:
                await self.warm.discard(warm)  # still waiting only when the job failed before it
            if not self.keep:
                make_writable(base)
                shutil.rmtree(base, ignore_errors=True)
            if self.warm is not None:
                self.warm.refill()
        if running.lost:
            log.warning("job %s attempt %s was taken from us; not reporting", job.id, attempt)
            return
        running.pending_log.append(f"[kswarm] {verdict.state.value}: {verdict.error or 'ok'}\n")
        request = FinishRequest(
            instance=self.instance,
            attempt=attempt,
            state=verdict.state,
            verdict=verdict.verdict,
            error=verdict.error,
            exit_code=verdict.exit_code,
            result=verdict.result,
            log=running.take_log()[-65_536:],
        )
        for retry in range(5):  # finishing is idempotent, so retrying a lost answer is safe
            try:
                reply = await client.finish(job.id, request)
                break
            except GatewayCallError as exc:
                log.warning("finish %s: %s", job.id, exc)
                await asyncio.sleep(0.5 * 2**retry)
        else:
            return  # the gateway reclaims it after claim_idle_s and runs it again
        if not reply.recorded:
            log.warning("job %s: result not recorded (job is %s)", job.id, reply.state.value)


async def _first(*aws: Awaitable[object]) -> None:
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.worker", description=__doc__)
    parser.add_argument("--pool", required=True, help="pool to serve")
    parser.add_argument("--gateway", default=os.environ.get("KSWARM_URL"), help="gateway URL (or KSWARM_URL)")
    parser.add_argument("--token", default=None, help="worker token (or KSWARM_TOKEN / --token-file)")
    parser.add_argument("--token-file", type=Path, default=None, help="file holding the worker token")
    parser.add_argument("--node", default=None, help="node of the pool this worker serves")
    parser.add_argument("--workdir", type=Path, default=None, help="where checkouts and outputs go")
    parser.add_argument("--heartbeat", type=float, default=2.0, help="seconds between heartbeats")
    parser.add_argument("--clone-url", default="{gateway}/git/{repo}.git", help="clone URL template")
    parser.add_argument("--keep", action="store_true", help="keep job dirs (debugging)")
    parser.add_argument(
        "--no-warm", action="store_true", help="start every job's sandbox when it comes (no warm start)"
    )
    args = parser.parse_args(argv)
    token = args.token or os.environ.get("KSWARM_TOKEN")
    if args.token_file:
        token = args.token_file.read_text().strip()
    if not args.gateway or not token:
        parser.error("need --gateway (or KSWARM_URL) and a token (--token, --token-file or KSWARM_TOKEN)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    worker = Worker(
        args.pool,
        args.gateway,
        token,
        node=args.node,
        workdir=args.workdir,
        heartbeat_s=args.heartbeat,
        clone_url=args.clone_url,
        keep=args.keep,
        warm=not args.no_warm,
    )

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await worker.run(stop)

    try:
        asyncio.run(serve())
    except GatewayCallError as exc:  # e.g. a refused token or an unknown pool at start-up: one line
        print(f"worker: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
