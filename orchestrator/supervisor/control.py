"""What the supervisor does with a control request, and the view it publishes (gateway/swarm/models.py).

A request changes only the supervisor's own state -- the marker files the reconcile loop reads, the
agent's memory dir -- so handling it twice (read again after a crash before its acknowledgement) does
what handling it once did: a marker is set or gone, a snapshot exists, a rollback restores the same
snapshot. The gateway has done its own half (tokens) before posting.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

from gateway.client.http import GatewayCallError, GatewayClient
from gateway.swarm.models import (
    AgentStatus,
    ControlAction,
    ControlReply,
    ControlRequest,
    MemorySummary,
    ReplyStatus,
    SupervisorBeat,
    SwarmStatus,
)
from orchestrator.runtime.base import AgentRuntime, RuntimeStatus
from orchestrator.spec import SwarmSpec
from orchestrator.supervisor import memory
from orchestrator.supervisor.control_link import ControlLink, Delivery
from orchestrator.supervisor.reconcile import (
    AgentRecord,
    Reconciler,
    hold,
    is_quarantined,
    load_record,
    mark_restart,
    unhold,
)
from orchestrator.swarm_dir.provision import SwarmLayout

log = logging.getLogger("kswarm.control")


def agent_status(record: AgentRecord, observed: RuntimeStatus | None, quarantined: bool) -> AgentStatus:
    running = bool(observed and observed.running)
    return AgentStatus(
        name=record.name,
        state=record.state,
        running=running,
        ref=observed.ref if observed and running else "",
        uid=record.uid,
        started_at=record.started_at,
        restarts=record.restarts,
        last_exit=record.last_exit,
        last_error=record.last_error,
        last_output=record.last_output,
        last_heartbeat=record.last_heartbeat,
        next_start_at=record.next_start_at,
        quarantined=quarantined,
    )


def memory_summaries(layout: SwarmLayout, names: list[str]) -> dict[str, MemorySummary]:
    out = {}
    for name in names:
        try:
            out[name] = memory.summary(layout, name)
        except OSError as exc:  # an agent racing us in its own dir: shown, retried next pass
            out[name] = MemorySummary(error=f"memory of {name} unreadable right now: {exc.strerror}")
    return out


class ControlHandler:
    """Applies control requests to one swarm (its spec, files and backend)."""

    def __init__(
        self, spec: SwarmSpec, layout: SwarmLayout, runtime: AgentRuntime, client: GatewayClient
    ) -> None:
        self.spec = spec
        self.layout = layout
        self.runtime = runtime
        self.client = client

    def answer(self, delivery: Delivery) -> ControlReply:
        request = delivery.request
        if request is None:
            status, message = ReplyStatus.refused, delivery.problem
        else:
            try:
                status, message = self.handle(request)
            except memory.MemoryOpError as exc:
                status, message = ReplyStatus.refused, str(exc)
            except Exception as exc:  # one broken request must not end supervision; its asker hears why
                log.exception("control request %s failed", delivery.entry_id)
                status, message = ReplyStatus.failed, f"{type(exc).__name__}: {exc}"[:500]
        message = message.encode("utf-8", "replace").decode()  # it may quote what an agent named
        log.info("control %s %s: %s", delivery.entry_id, status.value, message)
        return ControlReply(
            request_id=delivery.entry_id,
            agent=request.agent if request else "",
            action=request.action if request else None,
            status=status,
            message=message,
            answered_at=time.time(),
        )

    def _revoke(self, name: str) -> str:
        try:
            revoked = self.client.revoke_tokens(name)
        except GatewayCallError as exc:
            log.warning("revoking %s's tokens: %s", name, exc)
            return f"its tokens could not be revoked here ({exc.detail})"
        return f"{revoked} more token(s) revoked" if revoked else ""

    def handle(self, request: ControlRequest) -> tuple[ReplyStatus, str]:
        name = request.agent
        agents = {a.name: a for a in self.spec.expand()}
        if name not in agents:
            return ReplyStatus.refused, f"{name} is not an agent of swarm {self.spec.swarm}"
        held = is_quarantined(self.layout, name)
        action = request.action
        if action == ControlAction.restart:
            if held:
                return ReplyStatus.refused, f"{name} is quarantined: release it first"
            mark_restart(self.layout, name)
            return ReplyStatus.done, f"restart of {name} requested: the orchestrator restarts it now"
        if action == ControlAction.quarantine:
            hold(self.layout, name)  # first: no pass may start it again meanwhile
            self.runtime.stop(name)
            # A token minted by a start between the gateway's revocation and now goes too.
            extra = self._revoke(name)
            tail = f" ({extra})" if extra else ""
            return ReplyStatus.done, f"stopped {name}; it stays stopped until released, files kept{tail}"
        if action == ControlAction.release:
            if not held:
                return ReplyStatus.done, f"{name} was not held by the orchestrator; it keeps running"
            extra = self._revoke(name)  # whatever was issued while it was held: it starts with a new one
            unhold(self.layout, name)
            tail = f" ({extra})" if extra else ""
            return ReplyStatus.done, f"released {name}: it starts with a fresh token{tail}"
        if action == ControlAction.snapshot:
            snap = memory.snapshot(self.layout, name, request.label)
            return ReplyStatus.done, f"saved snapshot {snap} of {name}'s memory"
        if action == ControlAction.rollback:
            restored = memory.rollback(self.layout, name, request.snapshot)
            tail = self._reread(name, request.restart and not held)
            saved = "(the previous one saved first)"
            return ReplyStatus.done, f"{name}'s memory rolled back to {restored} {saved}{tail}"
        if action == ControlAction.reset:
            snap = memory.reset(self.layout, agents[name], self.spec.swarm)
            tail = self._reread(name, request.restart and not held)
            return ReplyStatus.done, f"{name}'s memory reset to its identity banner (saved as {snap}){tail}"
        return ReplyStatus.refused, f"unknown action {action!r}"

    def _reread(self, name: str, restart: bool) -> str:
        if not restart:
            return ""
        mark_restart(self.layout, name)
        return "; restarting it to reread its memory"


class SwarmSeam:
    """The supervisor's side of the seam, over one ``ControlLink``: a heartbeat thread, the published
    view (after every pass and every request) and the requests taken between passes."""

    def __init__(
        self, link: ControlLink, handler: ControlHandler, reconciler: Reconciler, heartbeat_ttl_s: float
    ) -> None:
        self.link = link
        self.handler = handler
        self.reconciler = reconciler
        self.spec = handler.spec
        self.layout = handler.layout
        self.backend = handler.runtime.backend
        self.ttl_s = heartbeat_ttl_s
        self.started_at = time.time()
        self.last_pass_at: float | None = None
        self.records: dict[str, AgentRecord] = {}
        self._stop_beating = threading.Event()
        self._beater: threading.Thread | None = None

    # -- heartbeat ----------------------------------------------------------------------------
    def _beat(self) -> bool:
        return self.link.beat(
            SupervisorBeat(
                owner=self.link.owner,
                swarm=self.spec.swarm,
                pid=os.getpid(),
                host=socket.gethostname(),
                started_at=self.started_at,
                beat_at=time.time(),
                last_pass_at=self.last_pass_at,
                ttl_s=self.ttl_s,
            )
        )

    def _beat_until_stopped(self) -> None:
        # A thread of its own: a long pass (stopping a container waits up to its timeout) must not
        # look like a dead orchestrator. ``last_pass_at`` shows a loop that hangs.
        while not self._stop_beating.wait(max(0.2, self.ttl_s / 3)):
            self._beat()

    @classmethod
    def open(
        cls, redis_url: str, handler: ControlHandler, reconciler: Reconciler, heartbeat_ttl_s: float
    ) -> SwarmSeam:
        """Connect, beat once (taking the seam unless another live orchestrator holds it), keep beating."""
        owner = f"{handler.spec.swarm}@{handler.layout.root.resolve()}"
        seam = cls(ControlLink(redis_url, owner), handler, reconciler, heartbeat_ttl_s)
        seam.start()
        return seam

    def start(self) -> None:
        self._beat()
        self._beater = threading.Thread(target=self._beat_until_stopped, name="kswarm-heartbeat", daemon=True)
        self._beater.start()

    def stop(self) -> None:
        self._stop_beating.set()
        if self._beater is not None:
            self._beater.join(10)
        self.link.retire()
        self.link.close()

    # -- the view -----------------------------------------------------------------------------
    def passed(self, records: dict[str, AgentRecord]) -> None:
        """After a reconcile pass: remember its records and publish them."""
        self.records = records
        self.last_pass_at = time.time()
        self.publish()

    def publish(self) -> None:
        """Publish the view; a failure is logged, never raised: publishing must not end supervision."""
        if not self.link.holding:
            return
        try:
            self._publish()
        except Exception:
            log.exception("publishing the swarm's view failed")

    def _publish(self) -> None:
        names = [a.name for a in self.spec.expand()]
        agents = {}
        for name in names:
            record = self.records.get(name) or load_record(self.layout, name, self.backend)
            observed = self.reconciler.observed.get(name)
            agents[name] = agent_status(record, observed, is_quarantined(self.layout, name))
        status = SwarmStatus(
            swarm=self.spec.swarm,
            backend=self.backend,
            agents=names,
            supervisor_pid=os.getpid(),
            started_at=self.started_at,
            published_at=time.time(),
        )
        self.link.publish(status, agents, memory_summaries(self.layout, names))

    # -- requests -----------------------------------------------------------------------------
    def take(self, block_s: float) -> bool | None:
        """Handle what the stream holds for us (waiting up to ``block_s`` for something); True when
        something was handled, None when the stream cannot be read now (the caller waits itself)."""
        try:
            return self._take(block_s)
        except Exception:  # a bug here must not end supervision; what was not acknowledged comes again
            log.exception("taking control requests failed")
            return None

    def _take(self, block_s: float) -> bool | None:
        deliveries = self.link.deliveries(block_s)
        if deliveries is None:
            return None
        replies = []
        for delivery in deliveries:
            if self.link.answered(delivery.entry_id):
                self.link.acknowledge(delivery.entry_id)  # answered before a crash took the XACK
                continue
            replies.append(self.handler.answer(delivery))
        if replies:
            self.publish()  # first the view (a new snapshot, a held agent), then the answers
        for reply in replies:
            self.link.answer(reply)
        return bool(deliveries)
