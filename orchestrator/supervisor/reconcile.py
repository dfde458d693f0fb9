"""The reconcile loop: desired agents (the spec) against actual ones (the backend), with restarts.

One pass (``Reconciler.reconcile_once``):

- an agent the spec no longer names is removed (its files stay);
- a quarantined agent is kept stopped;
- an agent that is down is started -- at once when it never ran or was asked to restart, otherwise
  after an exponential backoff; too many crashes within a window make the state ``crash-loop``
  (still retried, at the longest delay, and announced in #ops);
- a running agent whose last heartbeat (or start) is older than ``stall_after_s`` is ``stalled`` and
  announced in #ops, once; a later heartbeat clears it;
- where no mount bounds agents' disks (``orchestrator.swarm_dir.disk``), a running agent whose dirs hold more
  than ``resources.disk`` (measured every ``disk_check_s``) is quarantined, the reason in its record.

Only the orchestrator writes the records in ``swarm/agents/<name>.json``. Changes are asked for through
marker files (``swarm/requests/<name>.restart``, ``swarm/quarantine/<name>``): the supervisor writes them
when it takes a request from the control stream (``control.py``), and ``kswarm agent ...`` on
a machine that shares the home writes them itself. The gateway never touches these files.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from gateway.client.http import GatewayCallError, GatewayClient
from gateway.swarm.models import AgentState
from orchestrator.runtime.base import AgentRuntime, LaunchSpec, RuntimeStatus
from orchestrator.spec import AgentSpec, SwarmSpec
from orchestrator.swarm_dir import disk
from orchestrator.swarm_dir.provision import SwarmLayout, allocate_uid, provision

log = logging.getLogger("kswarm.reconcile")


class AgentRecord(BaseModel):
    """The orchestrator's bookkeeping for one agent (what ``kswarm ps`` shows)."""

    name: str = Field(description="Agent name.")
    backend: str = Field(description="process or docker.")
    state: AgentState = Field("new", description="Lifecycle state.")
    uid: int | None = Field(None, description="The uid the agent runs as.")
    started_at: float | None = Field(None, description="Unix time of the current run's start.")
    restarts: int = Field(0, description="Restarts by the orchestrator (crashes and requests).")
    crashes: list[float] = Field(default_factory=list, description="Recent crash times (within the window).")
    next_start_at: float | None = Field(None, description="When a backed-off restart is due.")
    last_exit: int | None = Field(None, description="Exit status of the last run, when known.")
    last_heartbeat: float | None = Field(None, description="Last heartbeat the gateway saw.")
    last_error: str = Field("", description="Why the last start failed, if it did.")
    last_output: str = Field(
        "", description="The last error line its last run wrote before it exited (its log), if it crashed."
    )


ERROR_HINT = re.compile(r"error|exception|traceback|fatal|not found|no such|denied|refused", re.IGNORECASE)
LOG_TAIL_LINES = 40
LAST_ERROR_CHARS = 300


def last_error_line(runtime: AgentRuntime, name: str) -> str:
    """What a crashed run said last, for the operator: the last line of its log's tail that reads like
    an error (a traceback's final line, ``ModuleNotFoundError: ...``), else its last line; '' if none.
    The agent wrote it: bounded, and shown escaped by every view."""
    try:
        lines = [line.strip() for line in runtime.logs(name, tail=LOG_TAIL_LINES)]
    except Exception as exc:  # no log (a container already removed): the exit status still says something
        log.info("no log of %s to tell why it exited: %s", name, exc)
        return ""
    lines = [line for line in lines if line]
    errors = [line for line in lines if ERROR_HINT.search(line)]
    chosen = (errors or lines or [""])[-1]
    return chosen[:LAST_ERROR_CHARS].encode("utf-8", "replace").decode()


def control_dir(layout: SwarmLayout, kind: Literal["requests", "quarantine"]) -> Path:
    return layout.root / kind


def load_record(layout: SwarmLayout, name: str, backend: str) -> AgentRecord:
    path = layout.state_file(name)
    try:
        return AgentRecord.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return AgentRecord(name=name, backend=backend)


def save_record(layout: SwarmLayout, record: AgentRecord) -> None:
    path = layout.state_file(record.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(record.model_dump_json(indent=1))
    tmp.replace(path)


def is_quarantined(layout: SwarmLayout, name: str) -> bool:
    return (control_dir(layout, "quarantine") / name).exists()


def hold(layout: SwarmLayout, name: str) -> None:
    """The quarantine marker: the next pass stops the agent and keeps it stopped."""
    marker = control_dir(layout, "quarantine")
    marker.mkdir(parents=True, exist_ok=True)
    (marker / name).write_text(str(time.time()))


def unhold(layout: SwarmLayout, name: str) -> None:
    (control_dir(layout, "quarantine") / name).unlink(missing_ok=True)


def mark_restart(layout: SwarmLayout, name: str) -> None:
    """The restart marker: the next pass stops and starts the agent (not counted as a crash)."""
    requests = control_dir(layout, "requests")
    requests.mkdir(parents=True, exist_ok=True)
    (requests / f"{name}.restart").touch()


def backoff_delay(crashes: int, base: float, maximum: float) -> float:
    """base, 2·base, 4·base, ... capped at maximum (crashes counts the one that just happened)."""
    return min(maximum, base * 2 ** max(0, crashes - 1))


class Reconciler:
    """One swarm's desired-vs-actual logic; ``reconcile_once`` is safe to call at any pace."""

    def __init__(
        self,
        spec: SwarmSpec,
        runtime: AgentRuntime,
        layout: SwarmLayout,
        client: GatewayClient,
        gateway_socket: Path,
        uid_base: int,
        use_uids: bool,
    ) -> None:
        self.spec = spec
        self.runtime = runtime
        self.layout = layout
        self.client = client
        self.gateway_socket = gateway_socket
        self.uid_base = uid_base
        self.use_uids = use_uids
        self.lc = spec.lifecycle
        # What the backend said of each agent at the last pass (after its starts): pid/container, running.
        self.observed: dict[str, RuntimeStatus] = {}
        self.disk_checked: dict[str, float] = {}  # the watchdog's last measurement of each agent

    # -- helpers ----------------------------------------------------------------------------
    def notice(self, text: str) -> None:
        """Announce in #ops; a gateway outage must not stop the loop."""
        try:
            self.client.post("ops", text)
        except GatewayCallError as exc:
            log.warning("could not post to #ops: %s", exc)

    def _heartbeats(self) -> dict[str, float | None]:
        try:
            return {a["name"]: a.get("last_heartbeat") for a in self.client.agents()}
        except GatewayCallError as exc:
            log.warning("no heartbeats from the gateway: %s", exc)
            return {}

    def _start(self, agent: AgentSpec, rec: AgentRecord, now: float) -> None:
        uid = allocate_uid(self.layout, agent.name, self.uid_base) if self.use_uids else None
        rec.uid = uid
        try:
            provision(self.client, self.layout, agent, self.spec.swarm, uid)
            status = self.runtime.start(
                LaunchSpec(agent=agent, swarm=self.spec.swarm, uid=uid, gateway_socket=self.gateway_socket)
            )
        except Exception as exc:  # a failed start is a crash of sorts: back off, show why
            log.exception("starting %s failed", agent.name)
            # Text that may carry names from the agent's dirs: kept encodable (records are JSON).
            rec.last_error = f"{type(exc).__name__}: {exc}"[:500].encode("utf-8", "replace").decode()
            self._crashed(rec, now, None)
            self.observed[agent.name] = RuntimeStatus(agent.name, False)
            return
        self.observed[agent.name] = status
        rec.state = "starting"
        rec.started_at = status.started_at or now
        rec.next_start_at = None
        rec.last_error = ""

    def _crashed(self, rec: AgentRecord, now: float, exit_code: int | None) -> None:
        rec.crashes = [t for t in rec.crashes if now - t < self.lc.crash_window_s] + [now]
        rec.last_exit = exit_code
        delay = backoff_delay(len(rec.crashes), self.lc.backoff_base_s, self.lc.backoff_max_s)
        rec.next_start_at = now + delay
        entering = rec.state != "crash-loop"
        if len(rec.crashes) >= self.lc.crash_loop_after:
            rec.state = "crash-loop"
            if entering:
                self.notice(
                    f"agent {rec.name} is in a crash loop: {len(rec.crashes)} crashes in "
                    f"{self.lc.crash_window_s:g}s (last exit {exit_code}); retrying every {delay:g}s"
                )
        else:
            rec.state = "backoff"
        rec.started_at = None

    # -- the pass ---------------------------------------------------------------------------
    def reconcile_once(self, now: float | None = None) -> dict[str, AgentRecord]:
        now = time.time() if now is None else now
        desired = {a.name: a for a in self.spec.expand()}
        actual = self.runtime.list()
        for name in actual:
            if name not in desired:
                log.info("removing %s (no longer in the spec)", name)
                self.runtime.remove(name)
                self.layout.state_file(name).unlink(missing_ok=True)
                self.observed.pop(name, None)
        beats = self._heartbeats()
        records: dict[str, AgentRecord] = {}
        starts: list[tuple[AgentSpec, AgentRecord]] = []
        for name, agent in desired.items():
            rec = load_record(self.layout, name, self.runtime.backend)
            status = actual.get(name) or self.runtime.status(name)
            rec.last_heartbeat = beats.get(name, rec.last_heartbeat)
            restart_marker = control_dir(self.layout, "requests") / f"{name}.restart"
            self.observed[name] = status
            if is_quarantined(self.layout, name):
                if status.running:
                    self.runtime.stop(name)
                    self.observed[name] = RuntimeStatus(name, False)
                rec.state, rec.started_at, rec.next_start_at = "quarantined", None, None
            elif restart_marker.exists():
                self.runtime.stop(name)
                restart_marker.unlink(missing_ok=True)
                rec.restarts += 1
                starts.append((agent, rec))
            elif status.running and self._over_disk(agent, rec, now):
                self.observed[name] = RuntimeStatus(name, False)
            elif status.running:
                self._running(rec, now)
            elif rec.state in ("starting", "running", "stalled"):  # it was up and is gone: a crash
                log.warning("agent %s exited (status %s)", name, status.exit_code)
                rec.last_output = last_error_line(self.runtime, name)
                self._crashed(rec, now, status.exit_code)
                if rec.next_start_at is not None and rec.next_start_at <= now:
                    rec.restarts += 1
                    starts.append((agent, rec))
            elif rec.state in ("backoff", "crash-loop"):
                if rec.next_start_at is None or rec.next_start_at <= now:
                    rec.restarts += 1
                    starts.append((agent, rec))
            else:  # new, quarantined-then-released, failed: start now
                starts.append((agent, rec))
            records[name] = rec
        # Starts run in parallel: a 16-agent swarm comes up in about the time of its slowest start.
        if starts:
            with ThreadPoolExecutor(
                max_workers=min(8, len(starts)), thread_name_prefix="kswarm-start"
            ) as pool:
                list(pool.map(lambda item: self._start(item[0], item[1], now), starts))
        for rec in records.values():
            save_record(self.layout, rec)
        return records

    def stop_all(self, force: threading.Event | None = None, timeout: float = 10.0) -> list[str]:
        """Stop every agent of the spec side by side (TERM, KILL after ``timeout``; at once when
        ``force`` is set meanwhile) and remove what the backend kept of it (a container, its volumes;
        never the agent's files), leaving records that the next start reads as a clean stop."""
        names = [a.name for a in self.spec.expand() if self.runtime.status(a.name).running]
        force = force or threading.Event()
        if names:
            with ThreadPoolExecutor(
                max_workers=min(16, 2 * len(names)), thread_name_prefix="kswarm-stop"
            ) as pool:
                pending = {pool.submit(self.runtime.stop, n, timeout) for n in names}
                killed = False
                while pending:
                    _, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                    if pending and force.is_set() and not killed:
                        killed = True  # KILL what is still running; the graceful stops then return
                        pending |= {pool.submit(self.runtime.stop, n, 0.0) for n in names}
                # Stopped is not enough: a container (and its volumes, pointers to the agent's dirs) would
                # outlive the swarm. The dirs stay; the next start binds them again.
                list(pool.map(self.runtime.remove, names))
        for agent in self.spec.expand():
            rec = load_record(self.layout, agent.name, self.runtime.backend)
            if rec.state not in ("quarantined", "crash-loop", "backoff"):
                rec.state, rec.started_at, rec.next_start_at = "new", None, None  # not a crash
                save_record(self.layout, rec)
        return names

    def _over_disk(self, agent: AgentSpec, rec: AgentRecord, now: float) -> bool:
        """The watchdog (no mount bounds the disk here): quarantine an agent whose dirs hold more than
        ``resources.disk``; True if it did. A mount, where there is one, fails the write instead."""
        if disk.mount_unavailable() is None:
            return False
        if now - self.disk_checked.get(agent.name, 0.0) < self.lc.disk_check_s:
            return False
        self.disk_checked[agent.name] = now
        bound = agent.resources.disk_bytes()
        used = disk.used_beyond(self.layout.agent_data(agent.name), bound)
        if used is None:
            return False
        hold(self.layout, agent.name)
        self.runtime.stop(agent.name)
        rec.state, rec.started_at, rec.next_start_at = "quarantined", None, None
        rec.last_error = (
            f"over its disk bound: its dirs hold more than {used >> 20} MiB, resources.disk is "
            f"{agent.resources.disk}; free space there, then `kswarm agent release {agent.name}`"
        )
        self.notice(f"agent {agent.name} is quarantined: {rec.last_error}")
        return True

    def _running(self, rec: AgentRecord, now: float) -> None:
        if rec.started_at is None:
            rec.started_at = now  # adopted from an earlier orchestrator without a record
        if rec.state in ("new", "starting", "backoff", "crash-loop", "quarantined", "failed"):
            rec.state = "running"
        if rec.crashes and now - rec.started_at > self.lc.stable_after_s:
            rec.crashes = []  # up long enough: past crashes no longer count
            rec.last_output = ""  # nor does what the last crashed run said
        last_sign = max(rec.last_heartbeat or 0.0, rec.started_at)
        silent = now - last_sign
        if silent > self.lc.stall_after_s and rec.state != "stalled":
            rec.state = "stalled"
            self.notice(f"agent {rec.name} is stalled: no heartbeat for {silent:.0f}s")
        elif silent <= self.lc.stall_after_s and rec.state == "stalled":
            rec.state = "running"
            self.notice(f"agent {rec.name} is heartbeating again")
