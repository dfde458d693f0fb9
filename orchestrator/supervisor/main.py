"""The orchestrator's entry point: ``Supervisor`` runs the reconcile loop (``python -m
orchestrator.supervisor``). The operator actions (``kswarm down``, ``agent restart|quarantine|release``,
``ps``) are ``operations.py``, re-exported here. ``python -m orchestrator.supervisor`` runs ``main``
(``__main__.py``).

At most one supervisor runs per ``$KSWARM_HOME``: it holds an ``flock`` on ``swarm/.supervisor.lock``
for its whole life, and a second one fails fast instead of duplicating agents. With the gateway's
Redis it also holds the swarm seam (``control.py``): a heartbeat, the published view and the control
stream through which the UI and ``/api/swarm`` reach it. With ``workers=True`` (what ``kswarm up -f``
asks for) it also runs the spec's pools' job workers (``pool_workers.py``).

Under ``kswarm up`` the supervisor is a process of its own (``python -m orchestrator.supervisor``,
tethered to ``kswarm up``), never a thread of the gateway's process: the reconcile loop's work (``/proc``
scans, memory summaries, provisioning) then costs the gateway neither memory nor event-loop time.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from gateway.client.http import GatewayCallError, GatewayClient, GatewayTarget
from orchestrator.spec import SwarmSpec
from orchestrator.supervisor.control import ControlHandler, SwarmSeam
from orchestrator.supervisor.control_link import seam_redis_url
from orchestrator.supervisor.operations import (
    SupervisorError,
    SupervisorLock,
    SwarmInfo,
    agent_rows,
    agent_uid_base,
    make_runtime,
    quarantine,
    release,
    request_restart,
    say,
    stop_supervisor,
    stop_swarm,
    uses_uids,
)
from orchestrator.supervisor.orphans import become_subreaper, reap_orphans, reap_until_settled
from orchestrator.supervisor.pool_workers import WorkerFleet
from orchestrator.supervisor.reconcile import AgentRecord, Reconciler
from orchestrator.swarm_dir.disk import disk_warning
from orchestrator.swarm_dir.provision import SwarmLayout

__all__ = [
    "Supervisor",
    "SupervisorError",
    "SupervisorLock",
    "SwarmInfo",
    "agent_rows",
    "main",
    "make_runtime",
    "quarantine",
    "release",
    "request_restart",
    "stop_supervisor",
    "stop_swarm",
]

log = logging.getLogger("kswarm.supervisor")

HEARTBEAT_TTL_S = 15.0
REQUEST_WAIT_S = 0.5  # longest block on the control stream: how soon a stop is noticed
REAP_SETTLE_S = 3.0  # after the last stop: how long the stopped agents' orphans may take to die


class Supervisor:
    """Keeps a swarm's agents running. ``run(stop)`` blocks until ``stop`` is set; agents keep running
    after it returns (the next supervisor adopts them); ``shutdown()`` stops them all."""

    def __init__(
        self,
        spec: SwarmSpec,
        backend: str,
        home: Path,
        gateway_url: str | None,
        operator_token: str,
        socket_path: Path,
        redis_url: str | None = None,
        heartbeat_ttl_s: float = HEARTBEAT_TTL_S,
        workers: bool = False,
    ) -> None:
        self.spec = spec
        self.backend = backend
        self.layout = SwarmLayout(home)
        self.socket_path = socket_path
        self.gateway_url = gateway_url
        target = GatewayTarget(
            token=operator_token, url=gateway_url, socket=None if gateway_url else socket_path
        )
        self.client = GatewayClient(target)
        self.runtime = make_runtime(backend, self.layout, spec)
        self.reconciler = Reconciler(
            spec,
            self.runtime,
            self.layout,
            self.client,
            socket_path,
            agent_uid_base(spec, backend, self.layout) if uses_uids(backend, self.runtime) else 0,
            uses_uids(backend, self.runtime),
        )
        self.lock = SupervisorLock(self.layout)
        self.redis_url = seam_redis_url(home, redis_url)
        self.heartbeat_ttl_s = heartbeat_ttl_s
        self.seam: SwarmSeam | None = None
        self.fleet: WorkerFleet | None = None
        # Set where this process is the subreaper of its agents (``main``; not a test's thread).
        self.reaps_orphans = False
        if workers:
            if not gateway_url:
                raise SupervisorError("job workers need the gateway's URL (they clone over HTTP)")
            self.fleet = WorkerFleet(spec, self.layout, self.client, gateway_url, self.reconciler.notice)

    @property
    def warning(self) -> str | None:
        """A line for ``kswarm up`` to print (e.g. the process backend cannot isolate files here, or
        only a watchdog bounds agents' disks)."""
        lines = [getattr(self.runtime, "warning", None), disk_warning()]
        return "; ".join(line for line in lines if line) or None

    def _setup(self) -> None:
        for channel in self.spec.channels:
            try:
                self.client.create_channel(channel.name, channel.topic)
            except GatewayCallError as exc:
                log.warning("channel %s: %s", channel.name, exc)
        self._provision_repos()
        SwarmInfo(
            swarm=self.spec.swarm,
            backend=self.backend,
            spec_path=str(self.spec.source) if self.spec.source else None,
            supervisor_pid=os.getpid(),
            started_at=time.time(),
            gateway_url=self.gateway_url,
            gateway_socket=str(self.socket_path),
            agents=[a.name for a in self.spec.expand()],
            # Not the alert targets: their URLs are secrets (a dump shows them as **********, which
            # would not validate again), the gateway has them already, and no command needs them.
            spec=self.spec.model_dump(mode="json", exclude={"source", "alerts"}),
        ).save(self.layout)

    def _provision_repos(self) -> None:
        """The spec's repos in the forge (org = the swarm's name), each protected by its review policy
        (the gate's own model, as the spec holds it); a dataset repo seeded with the task catalogue."""
        for repo in self.spec.repos:
            policy = self.spec.repo_policy(repo).model_dump(mode="json")
            try:
                self.client.request(
                    "POST", "/api/forge/repos", json={"org": self.spec.swarm, "name": repo.name}
                )
                self.client.request(
                    "PUT", f"/api/forge/repos/{self.spec.swarm}/{repo.name}/policy", json=policy
                )
                if repo.kind == "dataset":
                    # The task definitions the workers trust, on the protected main (only while main
                    # holds just its initial commit: idempotent). Posting work is the lead's call.
                    self.client.request(
                        "POST",
                        "/api/tasks/seed",
                        json={"repo": f"{self.spec.swarm}/{repo.name}", "post_tasks": False},
                    )
            except GatewayCallError as exc:
                log.warning("repo %s/%s: %s", self.spec.swarm, repo.name, exc)

    def run(
        self, stop: threading.Event, stop_swarm_on_exit: bool = False, force: threading.Event | None = None
    ) -> None:
        """Supervise until ``stop`` is set. The job workers always stop with it (they are its
        children); the agents keep running (the next supervisor adopts them) unless
        ``stop_swarm_on_exit``: then they are stopped first, side by side (``force``: killed at once)."""
        if not self.lock.acquire():
            raise SupervisorError(f"another orchestrator already supervises {self.layout.root}")
        try:
            if self.fleet is not None:
                from orchestrator.supervisor.pool_workers import kill_orphans

                for pid in kill_orphans(self.layout):
                    log.warning("killed worker pid %s left running by an earlier orchestrator", pid)
            self._setup()
            if self.redis_url is None:
                log.warning("no Redis of the gateway known: the UI does not see this swarm (redis_url)")
            else:
                handler = ControlHandler(self.spec, self.layout, self.runtime, self.client)
                self.seam = SwarmSeam.open(self.redis_url, handler, self.reconciler, self.heartbeat_ttl_s)
                while self.seam.take(0):  # what was asked while no orchestrator ran comes first
                    pass
            while not stop.is_set():
                try:
                    records = self.reconciler.reconcile_once()
                except Exception:  # one bad pass (Docker hiccup, full disk) must not end supervision
                    log.exception("reconcile pass failed")
                    records = {}
                if self.fleet is not None:
                    try:
                        self.fleet.reconcile_once()
                    except Exception:
                        log.exception("worker pass failed")
                if self.seam is not None:
                    self.seam.passed(records)
                if self.reaps_orphans:
                    reap_orphans(self._waited_for())
                self._wait(stop)
        finally:
            self._stop_children(stop_swarm_on_exit, force or threading.Event())
            if self.reaps_orphans:
                reap_until_settled(self._waited_for, REAP_SETTLE_S if stop_swarm_on_exit else 0.0)
            if self.seam is not None:
                self.seam.stop()
            self.lock.release()
            self.client.close()

    def _waited_for(self) -> set[int]:
        """Children that a ``Popen`` of ours waits for (never reaped behind its back)."""
        procs = [*getattr(self.runtime, "children", {}).values()]
        if self.fleet is not None:
            procs += self.fleet.procs.values()
        return {proc.pid for proc in procs}

    def _stop_children(self, stop_agents: bool, force: threading.Event) -> None:
        """Agents first (they may still submit jobs), then the workers, each step said on stderr."""
        if stop_agents:
            began = time.monotonic()
            names = self.reconciler.stop_all(force)
            if names:
                say(f"stopped {len(names)} agent(s) in {time.monotonic() - began:.1f} s")
        if self.fleet is not None:
            began = time.monotonic()
            count = self.fleet.stop_all(force.is_set())
            if count:
                say(f"stopped {count} job worker(s) in {time.monotonic() - began:.1f} s")

    def _wait(self, stop: threading.Event) -> None:
        """Until the next pass; a control request cuts the wait short (its restart happens at once)."""
        deadline = time.monotonic() + self.spec.lifecycle.reconcile_s
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            handled = self.seam.take(min(left, REQUEST_WAIT_S)) if self.seam is not None else None
            if handled:
                return
            if handled is None:
                stop.wait(min(left, REQUEST_WAIT_S))

    def reconcile_once(self) -> dict[str, AgentRecord]:
        """One pass, for callers that drive the loop themselves (tests, ``kswarm up --once``)."""
        return self.reconciler.reconcile_once()

    def shutdown(self, purge: bool = False) -> None:
        """Stop (and with ``purge`` delete) every agent of this swarm."""
        stop_swarm(self.layout, self.runtime, purge)


def main(argv: list[str] | None = None) -> int:
    """``python -m orchestrator.supervisor -f swarm.yaml``: the orchestrator alone, next to a running
    gateway found through $KSWARM_URL/$KSWARM_TOKEN or $KSWARM_HOME (compose's orchestrator service,
    and the child process ``kswarm up -f`` runs it as, with ``--workers --stop-swarm-on-exit``).

    SIGTERM or SIGINT ends it (a second one, with ``--stop-swarm-on-exit``, kills instead of waiting)."""
    import argparse

    from gateway.client.http import kswarm_home, target_from_env
    from orchestrator.spec import SpecError, load_spec

    parser = argparse.ArgumentParser(prog="python -m orchestrator.supervisor")
    parser.add_argument("-f", "--file", type=Path, default=Path("swarm.yaml"), help="The swarm spec.")
    parser.add_argument("--backend", choices=["process", "docker"], help="Default: the spec's backend.")
    parser.add_argument(
        "--socket", type=Path, help="Gateway unix socket; default $KSWARM_HOME/run/gateway.sock."
    )
    parser.add_argument(
        "--redis-url",
        help="The gateway's Redis (the swarm seam); default $REDIS_URL, $KSWARM_GATEWAY_REDIS_URL or "
        "the home's embedded Redis.",
    )
    parser.add_argument(
        "--heartbeat-ttl",
        type=float,
        default=HEARTBEAT_TTL_S,
        help="Seconds after its last heartbeat that the UI takes this orchestrator for gone.",
    )
    parser.add_argument(
        "--workers", action="store_true", help="Also run the spec's pools' job workers (kswarm up -f)."
    )
    parser.add_argument(
        "--stop-swarm-on-exit",
        action="store_true",
        help="On SIGTERM/SIGINT stop the agents too (default: they keep running, the next one adopts them).",
    )
    parser.add_argument("--log-file", type=Path, help="Also log INFO and above to this file.")
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="On stderr."
    )
    args = parser.parse_args(argv)
    configure_logging(args.log_level, args.log_file)
    home = kswarm_home()
    target = target_from_env(home)
    if not target.token:
        print("no operator token: set KSWARM_TOKEN or write $KSWARM_HOME/operator.token", file=sys.stderr)
        return 2
    try:
        spec = load_spec(args.file)
    except (SpecError, OSError) as exc:
        print(f"cannot load the spec: {exc}", file=sys.stderr)
        return 2
    socket = args.socket or target.socket or home / "run" / "gateway.sock"
    stop, force = threading.Event(), threading.Event()

    def signalled(*_: object) -> None:
        (force if stop.is_set() else stop).set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signalled)
    try:
        supervisor = Supervisor(
            spec,
            args.backend or spec.backend,
            home,
            target.url,
            target.token,
            socket,
            redis_url=args.redis_url,
            heartbeat_ttl_s=args.heartbeat_ttl,
            workers=args.workers,
        )
        if supervisor.warning:
            log.warning("%s", supervisor.warning)
        supervisor.reaps_orphans = become_subreaper()
        supervisor.run(stop, stop_swarm_on_exit=args.stop_swarm_on_exit, force=force)
    except SupervisorError as exc:
        print(f"orchestrator: {exc}", file=sys.stderr)
        return 1
    return 0


def configure_logging(level: str, log_file: Path | None) -> None:
    handlers: list[logging.Handler] = []
    console = logging.StreamHandler()
    console.setLevel(level)
    handlers.append(console)
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        to_file = logging.FileHandler(log_file)
        to_file.setLevel(logging.INFO)
        handlers.append(to_file)
    logging.basicConfig(
        level=min(logging.INFO, logging.getLevelName(level)),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        handlers=handlers,
    )


if __name__ == "__main__":
    sys.exit(main())
