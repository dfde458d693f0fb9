"""The gateway's side of the seam in Redis: read what the supervisor published, post control requests,
read the supervisor's replies. Async (the gateway's event loop); no file of the orchestrator is read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from gateway.redis_facade import StrRedis
from gateway.swarm import keys
from gateway.swarm.models import (
    AgentStatus,
    ControlReply,
    ControlRequest,
    MemorySummary,
    SupervisorBeat,
    SwarmReport,
    SwarmStatus,
)

log = logging.getLogger("kswarm.swarm")

NO_SWARM = (
    "no swarm has reported to this gateway (start one with kswarm up -f swarm.yaml, or run "
    "python -m orchestrator.supervisor -f swarm.yaml next to it with this gateway's Redis)"
)
NO_SUPERVISOR = "no orchestrator is running for this swarm (kswarm up)"
REPLY_POLL_S = 0.05
REQUEST_ID = r"^[0-9]{1,20}-[0-9]{1,20}$"  # a stream entry id

M = TypeVar("M", bound=BaseModel)


def _text(value: str | bytes | None) -> str | None:
    """redis-py types replies as bytes or str; this client decodes them (``decode_responses``)."""
    return value.decode() if isinstance(value, bytes) else value


def _parse(model: type[M], raw: str | bytes | None, what: str) -> M | None:
    """``raw`` as ``model``; None (logged) when missing or of another shape (a supervisor of another
    version: the panel then says what it lacks instead of failing)."""
    raw = _text(raw)
    if raw is None:
        return None
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        log.warning("unreadable %s in Redis: %s", what, exc.errors()[:1])
        return None


class SwarmBoard:
    """Reads and writes the seam's keys (``gateway.swarm.keys``) on the gateway's Redis."""

    def __init__(self, redis: StrRedis) -> None:
        self.redis = redis

    async def report(self) -> SwarmReport:
        """The last published view, and whether a supervisor's heartbeat is current."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(keys.STATUS)
            pipe.hgetall(keys.AGENTS)
            pipe.hget(keys.SUPERVISOR, "json")
            raw_status, raw_agents, raw_beat = await pipe.execute()
        status = _parse(SwarmStatus, raw_status, "swarm status")
        beat = _parse(SupervisorBeat, raw_beat, "supervisor heartbeat")
        if status is None:
            return SwarmReport(known=False, supervising=beat is not None, reason=NO_SWARM, supervisor=beat)
        records = {
            name: record
            for name, raw in raw_agents.items()
            if (record := _parse(AgentStatus, raw, f"record of {name}")) is not None
        }
        return SwarmReport(
            known=True,
            supervising=beat is not None,
            reason="" if beat is not None else NO_SUPERVISOR,
            status=status,
            supervisor=beat,
            agents=[records[name] for name in status.agents if name in records],
        )

    async def memory(self, name: str) -> MemorySummary | None:
        return _parse(MemorySummary, await self.redis.hget(keys.MEMORY, name), f"memory of {name}")

    async def submit(self, request: ControlRequest) -> str:
        """Append ``request`` to the control stream; returns its entry id (the request's id)."""
        entry_id = await self.redis.xadd(
            keys.CONTROL,
            {keys.CONTROL_FIELD: request.model_dump_json()},
            maxlen=keys.CONTROL_MAXLEN,
            approximate=True,
        )
        return _text(entry_id) or ""

    async def reply(self, request_id: str) -> ControlReply | None:
        return _parse(ControlReply, await self.redis.get(keys.reply(request_id)), f"reply {request_id}")

    async def wait_reply(self, request_id: str, wait_s: float) -> ControlReply | None:
        """The supervisor's reply, polled for up to ``wait_s`` (it answers within a pass)."""
        deadline = time.monotonic() + wait_s
        while True:
            got = await self.reply(request_id)
            if got is not None or time.monotonic() >= deadline:
                return got
            await asyncio.sleep(REPLY_POLL_S)

    async def request(self, request_id: str) -> ControlRequest | None:
        """The posted request ``request_id`` while the stream still holds it."""
        entries = await self.redis.xrange(keys.CONTROL, request_id, request_id, count=1)
        if not entries:
            return None
        raw = _text((entries[0][1] or {}).get(keys.CONTROL_FIELD))
        try:
            return ControlRequest.model_validate_json(raw or "")
        except ValidationError:
            return None
