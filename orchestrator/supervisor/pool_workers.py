"""The swarm's job workers: what ``kswarm up -f`` runs for each pool of the spec, and keeps running.

For a pool with ``workers: N`` the fleet runs N ``python -m orchestrator.worker`` processes, worker *i*
serving the pool's node *i* (a pool whose executor allocates devices itself, as Slurm does: one worker,
which submits every job to the scheduler; a Docker pool: workers that run each job in a container -- the
pool's ``executor`` decides, the worker reads it from the gateway). They run as the pool's worker
principal (``worker-<pool>``, bound to that pool by the gateway), whose token is in
``swarm/workers/<pool>.token`` (mode 600) and reaches the worker as ``--token-file``: never in an argv
or an environment another process could read.

Supervision is the agents' (``reconcile.py``): a worker that exits is restarted after an
exponential backoff, too many exits within the window is ``crash-loop`` (announced in #ops, still
retried at the longest delay), a long enough run forgets the crashes. Unlike agents, workers are the
orchestrator's children and die with it (``orchestrator.local.tether``): a job a dead worker held is
requeued by the gateway after ``claim_idle_s``; nothing is adopted. Records (``swarm/workers/<name>.json``)
are what ``kswarm workers`` shows, with the gateway's view (node lease, current job) beside them.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from gateway.client.home import write_secret
from gateway.client.http import GatewayCallError, GatewayClient
from gateway.client.jobs.pools import PoolConfig
from gateway.llm.config import scrub_env
from orchestrator.local.tether import tethered
from orchestrator.spec import Lifecycle, SwarmSpec
from orchestrator.supervisor.reconcile import backoff_delay
from orchestrator.swarm_dir.provision import SwarmLayout, token_valid

log = logging.getLogger("kswarm.workers")

WorkerState = Literal["new", "starting", "running", "backoff", "crash-loop", "stopped"]
STOP_TIMEOUT_S = 5.0  # a worker asked to stop finishes its heartbeats; then it is killed (jobs requeue)


class WorkerRecord(BaseModel):
    """One worker process of the swarm (what ``kswarm workers`` shows)."""

    name: str = Field(description="<pool>-<n>.")
    pool: str
    node: str | None = Field(
        None, description="The node it serves (None: the whole pool, its executor allocates devices)."
    )
    state: WorkerState = "new"
    pid: int | None = None
    started_at: float | None = None
    restarts: int = 0
    crashes: list[float] = Field(default_factory=list)
    next_start_at: float | None = None
    last_exit: int | None = None
    last_error: str = ""
    workdir: str | None = None


def workers_dir(layout: SwarmLayout) -> Path:
    return layout.root / "workers"


def load_records(layout: SwarmLayout) -> dict[str, WorkerRecord]:
    out: dict[str, WorkerRecord] = {}
    for path in sorted(workers_dir(layout).glob("*.json")):
        try:
            rec = WorkerRecord.model_validate_json(path.read_text())
        except (OSError, ValueError):
            continue
        out[rec.name] = rec
    return out


def pid_is_worker(pid: int | None) -> bool:
    """Whether ``pid`` runs ``orchestrator.worker`` (a recorded pid may have been reused since)."""
    if not pid:
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X") and b"orchestrator.worker" in argv


def kill_orphans(layout: SwarmLayout) -> list[int]:
    """Kill recorded workers still running without their orchestrator (a crash of both at once, or a
    supervisor that ran in a thread); returns their pids."""
    killed = []
    for rec in load_records(layout).values():
        if pid_is_worker(rec.pid):
            assert rec.pid is not None
            try:
                os.kill(rec.pid, signal.SIGKILL)
                killed.append(rec.pid)
            except ProcessLookupError:
                pass
    return killed


class WorkerFleet:
    """The spec's pools' worker processes; ``reconcile_once`` is safe to call at any pace."""

    def __init__(
        self,
        spec: SwarmSpec,
        layout: SwarmLayout,
        client: GatewayClient,
        gateway_url: str,
        notice: Callable[[str], None],
    ) -> None:
        self.spec = spec
        self.layout = layout
        self.client = client
        self.gateway_url = gateway_url
        self.notice = notice
        self.lc: Lifecycle = spec.lifecycle
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.dir = workers_dir(layout)

    def desired(self) -> dict[str, tuple[PoolConfig, str | None]]:
        out: dict[str, tuple[PoolConfig, str | None]] = {}
        for pool in self.spec.pools:
            for i, node in enumerate(pool.worker_nodes(), start=1):
                out[f"{pool.name}-{i}"] = (pool, node)
        return out

    # -- records and tokens -----------------------------------------------------------------

    def _save(self, rec: WorkerRecord) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o700)
        tmp = self.dir / f".{rec.name}.tmp"
        tmp.write_text(rec.model_dump_json(indent=1))
        tmp.replace(self.dir / f"{rec.name}.json")

    def token_file(self, pool: str) -> Path:
        return self.dir / f"{pool}.token"

    def _ensure_token(self, pool: str) -> Path:
        """A working token of the pool's worker principal in its token file (reused while valid)."""
        path = self.token_file(pool)
        try:
            old = path.read_text().strip()
        except OSError:
            old = ""
        if old and token_valid(self.client.target, old):
            return path
        granted = self.client.request("POST", f"/api/jobs/pools/{pool}/workers")
        self.dir.mkdir(parents=True, exist_ok=True)
        write_secret(path, granted["token"])
        return path

    # -- one pass ---------------------------------------------------------------------------

    def reconcile_once(self, now: float | None = None) -> dict[str, WorkerRecord]:
        now = time.time() if now is None else now
        desired = self.desired()
        records = load_records(self.layout)
        for name in set(records) - set(desired):
            self._stop(name, records[name])
            (self.dir / f"{name}.json").unlink(missing_ok=True)
        out: dict[str, WorkerRecord] = {}
        for name, (pool, node) in desired.items():
            rec = records.get(name) or WorkerRecord(name=name, pool=pool.name, node=node)
            proc = self.procs.get(name)
            code = proc.poll() if proc is not None else None
            if proc is not None and code is None:
                if rec.state != "running":
                    rec.state = "running"
                if rec.crashes and rec.started_at and now - rec.started_at > self.lc.stable_after_s:
                    rec.crashes = []
            elif proc is not None:  # it was ours and it exited: a crash
                self.procs.pop(name, None)
                self._cleanup(rec)
                self._release_node(rec, pool)
                self._crashed(rec, now, code)
            elif rec.state in ("backoff", "crash-loop"):
                if rec.next_start_at is None or rec.next_start_at <= now:
                    rec.restarts += 1
                    self._start(rec, pool, node, now)
            else:  # new, stopped, or a record left by an earlier orchestrator: start now
                self._start(rec, pool, node, now)
            self._save(rec)
            out[name] = rec
        return out

    def _crashed(self, rec: WorkerRecord, now: float, code: int | None) -> None:
        log.warning("worker %s exited (status %s)", rec.name, code)
        rec.crashes = [t for t in rec.crashes if now - t < self.lc.crash_window_s] + [now]
        rec.last_exit, rec.pid, rec.started_at = code, None, None
        delay = backoff_delay(len(rec.crashes), self.lc.backoff_base_s, self.lc.backoff_max_s)
        rec.next_start_at = now + delay
        if len(rec.crashes) >= self.lc.crash_loop_after:
            if rec.state != "crash-loop":
                self.notice(
                    f"worker {rec.name} (pool {rec.pool}) is in a crash loop: {len(rec.crashes)} exits in "
                    f"{self.lc.crash_window_s:g}s (last status {code}); retrying every {delay:g}s; "
                    f"its log: {self.log_file(rec.name)}"
                )
            rec.state = "crash-loop"
        else:
            rec.state = "backoff"

    def _release_node(self, rec: WorkerRecord, pool: PoolConfig) -> None:
        """The dead worker's node lease, released at once: its successor serves the node without
        waiting out the lease (the jobs it held are requeued by the gateway after claim_idle_s)."""
        try:
            self.client.request("DELETE", f"/api/jobs/pools/{rec.pool}/leases/{pool.served_node(rec.node)}")
        except GatewayCallError as exc:
            log.warning("releasing node %s of pool %s: %s", rec.node, rec.pool, exc)

    def log_file(self, name: str) -> Path:
        return self.layout.root / "logs" / f"worker-{name}.log"

    def _start(self, rec: WorkerRecord, pool: PoolConfig, node: str | None, now: float) -> None:
        try:
            token_file = self._ensure_token(pool.name)
            # Jobs may run as another uid (nobody): their checkouts must be reachable, so not under
            # the 0700 home; a fresh dir per start, removed when the worker stops.
            workdir = Path(tempfile.mkdtemp(prefix=f"kswarm-{self.spec.swarm}-{rec.name}-"))
            workdir.chmod(0o711)
            argv = [sys.executable, "-m", "orchestrator.worker", "--pool", pool.name]
            argv += ["--gateway", self.gateway_url, "--token-file", str(token_file)]
            argv += ["--workdir", str(workdir), *(["--node", node] if node else [])]
            log_path = self.log_file(rec.name)
            log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(log_path, "ab") as out:
                proc = subprocess.Popen(
                    tethered(os.getpid(), argv),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=worker_env(),
                    start_new_session=True,  # a Ctrl-C in the terminal is the orchestrator's to handle
                )
        except (GatewayCallError, OSError) as exc:
            rec.last_error = f"{type(exc).__name__}: {exc}"[:500]
            log.warning("starting worker %s failed: %s", rec.name, rec.last_error)
            self._crashed(rec, now, None)
            return
        self.procs[rec.name] = proc
        rec.pid, rec.started_at, rec.workdir = proc.pid, now, str(workdir)
        rec.state, rec.next_start_at, rec.last_error = "starting", None, ""

    # -- stopping ---------------------------------------------------------------------------

    def _cleanup(self, rec: WorkerRecord) -> None:
        if rec.workdir:
            subprocess.run(["chmod", "-R", "u+rwX", rec.workdir], capture_output=True, check=False)
            shutil.rmtree(rec.workdir, ignore_errors=True)
            rec.workdir = None

    def _stop(self, name: str, rec: WorkerRecord, timeout: float = STOP_TIMEOUT_S) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        elif proc is None and pid_is_worker(rec.pid):
            assert rec.pid is not None
            os.kill(rec.pid, signal.SIGKILL)
        self._cleanup(rec)
        rec.state, rec.pid, rec.started_at, rec.next_start_at = "stopped", None, None, None

    def stop_all(self, force: bool = False) -> int:
        """Stop every worker (``force``: kill at once); returns how many were running."""
        records = load_records(self.layout)
        running = [n for n, p in self.procs.items() if p.poll() is None]
        for proc in self.procs.values():  # TERM all first: they stop side by side
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL if force else signal.SIGTERM)
        for name in set(self.procs) | set(records):
            rec = records.get(name)
            if rec is None:
                continue
            self._stop(name, rec, 0.0 if force else STOP_TIMEOUT_S)
            self._save(rec)
        return len(running)


def worker_env() -> dict[str, str]:
    """The worker's environment: ours without any model key or token (it reads its own from a file)."""
    env = scrub_env(os.environ)
    for var in ("KSWARM_TOKEN", "KSWARM_URL", "KSWARM_OPERATOR_TOKEN"):
        env.pop(var, None)
    return env


WORKER_STALL_S = 60.0  # a worker that runs this long without taking its node lease is stalled


def worker_state(rec: WorkerRecord, leased: bool, jobs: int, now: float) -> tuple[str, str]:
    """(state, why) of one worker, in the agents' vocabulary (gateway/swarm/liveness.py): its process
    (the record and ``/proc``) and what the gateway sees (``leased``: it holds its node's lease). The
    one rule behind both ``kswarm workers`` and ``kswarm workers --json``."""
    if rec.state == "crash-loop":
        return (
            "crash-looping",
            f"{rec.restarts} restart(s); last exit {rec.last_exit}; {rec.last_error}".strip("; "),
        )
    if rec.state in ("new", "stopped", "backoff") or not pid_is_worker(rec.pid):
        why = "exited; restarted after a back-off" if rec.state == "backoff" else "not running"
        return "stopped", why + (f"; {rec.last_error}" if rec.last_error else "")
    if leased:
        return ("running", f"running {jobs} job(s)") if jobs else ("idle", "holds its node, no job")
    up_s = now - (rec.started_at or now)
    if up_s > WORKER_STALL_S:
        return "stalled", f"runs for {up_s:.0f} s but holds no node lease at the gateway"
    return "starting", "started; has not taken its node lease yet"


def worker_rows(layout: SwarmLayout, live: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What ``kswarm workers`` prints: each record with the gateway's view of its pool (``live``: the
    pools listing) -- the node lease's holder, when it was last heard of, and the jobs it runs."""
    by_pool = {str(p.get("pool")): p for p in live}
    rows: list[dict[str, Any]] = []
    now = time.time()
    for rec in load_records(layout).values():
        pool = by_pool.get(rec.pool, {})
        node = rec.node or pool_wide_node(pool.get("config") or {})
        lease: dict[str, Any] = next((w for w in pool.get("workers") or [] if w.get("node") == node), {})
        running = [j for j in pool.get("running_jobs") or [] if j.get("node") == node]
        state, why = worker_state(rec, bool(lease), len(running), now)
        rows.append(
            {
                "worker": rec.name,
                "pool": rec.pool,
                "node": node,
                "state": state,
                "reason": why,
                "pid": rec.pid,
                "uptime_s": round(now - rec.started_at, 1) if rec.started_at and rec.pid else None,
                "restarts": rec.restarts,
                "jobs": [j.get("id") for j in running],
                "serving_as": lease.get("worker"),
                "heartbeat_s": lease.get("seen_s_ago"),
                "last_exit": rec.last_exit,
                "last_error": rec.last_error,
            }
        )
    return rows


def pool_wide_node(config: dict[str, Any]) -> str:
    """The node a whole-pool worker (its executor allocates devices) serves, from the pool's config as
    the gateway lists it: named after the executor's kind (``PoolConfig.served_node``)."""
    executor = config.get("executor")
    return str(executor.get("kind", "-")) if isinstance(executor, dict) else str(executor or "-")


def purge_workers(layout: SwarmLayout) -> None:
    """Remove the workers' records, tokens and logs (``kswarm down --purge``)."""
    for rec in load_records(layout).values():
        if rec.workdir:
            shutil.rmtree(rec.workdir, ignore_errors=True)
    shutil.rmtree(workers_dir(layout), ignore_errors=True)
    for path in (layout.root / "logs").glob("worker-*.log"):
        path.unlink(missing_ok=True)
