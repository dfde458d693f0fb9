"""The supervisor's end of the swarm seam in Redis (keys and models: gateway/swarm/): its heartbeat, the
status it publishes, and the control stream it consumes as the one consumer of group ``supervisor``.

Synchronous (the supervisor is threads, not asyncio). Redis being down never stops supervision: every
call logs the outage once and returns as if nothing was there; what is not acknowledged is read again.
"""

from __future__ import annotations

import logging
import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from pydantic import ValidationError

from gateway.client.home import embedded_redis_socket
from gateway.redis_compat import stream_gone
from gateway.swarm import keys
from gateway.swarm.models import (
    AgentStatus,
    ControlReply,
    ControlRequest,
    MemorySummary,
    SupervisorBeat,
    SwarmStatus,
)

log = logging.getLogger("kswarm.control")

# Take the heartbeat when it is free or already ours; another live owner keeps it (returns 0).
CLAIM = """
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner and owner ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'json', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""
RETIRE = """
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
READ_COUNT = 50


def seam_redis_url(home: Path, explicit: str | None = None) -> str | None:
    """The gateway's Redis, where the swarm seam lives: ``explicit`` (what ``kswarm up`` and the demo
    pass), else ``$REDIS_URL``, else ``$KSWARM_GATEWAY_REDIS_URL`` (compose's), else this home's
    embedded Redis when its socket exists; None: no seam (the UI does not see this swarm; the local CLI
    still works)."""
    if explicit:
        return explicit
    for variable in ("REDIS_URL", "KSWARM_GATEWAY_REDIS_URL"):
        if os.environ.get(variable):
            return os.environ[variable]
    socket = embedded_redis_socket(home)
    return f"unix://{urllib.parse.quote(str(socket))}" if socket.exists() else None


@dataclass(frozen=True)
class Delivery:
    """One control entry handed to us: the request, or why it cannot be read."""

    entry_id: str
    request: ControlRequest | None
    problem: str = ""


class ControlLink:
    """One supervisor's connection to the seam; ``holding`` while its heartbeat owns the seam."""

    def __init__(self, redis_url: str, owner: str) -> None:
        self.url = redis_url
        self.owner = owner
        self.redis = redis.Redis.from_url(
            redis_url, decode_responses=True, socket_timeout=10, socket_connect_timeout=5
        )
        self.holding = False
        self._claim = self.redis.register_script(CLAIM)
        self._retire = self.redis.register_script(RETIRE)
        self._published: dict[tuple[str, str], str] = {}  # (hash, field) -> JSON last written
        self._group_ready = False
        self._down = False
        self._refused_by: str | None = None

    # -- outage bookkeeping -------------------------------------------------------------------
    def _failed(self, what: str, exc: Exception) -> None:
        if not self._down:
            log.warning("swarm seam: %s failed (%s); the UI shows the last published view", what, exc)
        self._down = True
        self._group_ready = False
        self._published.clear()  # republish everything once Redis answers again

    def _ok(self) -> None:
        if self._down:
            log.info("swarm seam: Redis answers again (%s)", self.url)
        self._down = False

    # -- heartbeat ----------------------------------------------------------------------------
    def beat(self, beat: SupervisorBeat) -> bool:
        """Refresh our heartbeat (or take a free one); False while another owner's is alive."""
        try:
            got = self._claim(
                keys=[keys.SUPERVISOR], args=[self.owner, beat.model_dump_json(), int(beat.ttl_s * 1000)]
            )
        except redis.RedisError as exc:
            self._failed("heartbeat", exc)
            return self.holding
        self._ok()
        holding = bool(got)
        if not holding and self._refused_by is None:
            try:
                other = self.redis.hget(keys.SUPERVISOR, "owner")
            except redis.RedisError:
                other = "another owner"
            self._refused_by = str(other)
            log.warning(
                "swarm seam: another orchestrator (%s) reports to this gateway's Redis; this one's agents "
                "are not shown and it takes no control requests until that heartbeat expires",
                other,
            )
        if holding and self._refused_by is not None:
            log.info("swarm seam: taken over from %s (its heartbeat expired)", self._refused_by)
            self._refused_by = None
            self._published.clear()
        self.holding = holding
        return holding

    def retire(self) -> None:
        """Drop our heartbeat: the UI says at once that no orchestrator runs (agents keep running)."""
        try:
            self._retire(keys=[keys.SUPERVISOR], args=[self.owner])
        except redis.RedisError as exc:
            self._failed("retiring the heartbeat", exc)
        self.holding = False

    # -- status -------------------------------------------------------------------------------
    def publish(
        self, status: SwarmStatus, agents: dict[str, AgentStatus], memory: dict[str, MemorySummary]
    ) -> None:
        """Write the view; a record or memory is rewritten only when it changed (memory can be large)."""
        if not self.holding:
            return
        wanted = {(keys.AGENTS, n): r.model_dump_json() for n, r in agents.items()}
        wanted |= {(keys.MEMORY, n): m.model_dump_json() for n, m in memory.items()}
        changed = {k: v for k, v in wanted.items() if self._published.get(k) != v}
        gone = [k for k in self._published if k not in wanted and k[0] == keys.AGENTS]
        try:
            with self.redis.pipeline(transaction=True) as pipe:
                if not self._published:  # a first write (or after an outage): agents of an older spec go
                    pipe.delete(keys.AGENTS, keys.MEMORY)
                pipe.set(keys.STATUS, status.model_dump_json())
                for (name, field), value in changed.items():
                    pipe.hset(name, field, value)
                for name, field in gone:
                    pipe.hdel(name, field)
                    pipe.hdel(keys.MEMORY, field)
                pipe.execute()
        except redis.RedisError as exc:
            self._failed("publishing the status", exc)
            return
        self._ok()
        for key in gone:
            self._published.pop(key, None)
            self._published.pop((keys.MEMORY, key[1]), None)
        self._published.update(changed)

    # -- the control stream -------------------------------------------------------------------
    def _ensure_group(self) -> None:
        if self._group_ready:
            return
        try:
            self.redis.xgroup_create(keys.CONTROL, keys.CONTROL_GROUP, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True

    def _read(self, entry_id: str, block_ms: int | None) -> list[Delivery]:
        reply: Any = self.redis.xreadgroup(
            keys.CONTROL_GROUP,
            keys.CONTROL_CONSUMER,
            {keys.CONTROL: entry_id},
            count=READ_COUNT,
            block=block_ms,
        )
        out = []
        streams: list[tuple[str, list[tuple[str, dict[str, str] | None]]]] = reply or []
        for _, entries in streams:
            for found_id, fields in entries:
                out.append(self._delivery(found_id, fields))
        return out

    @staticmethod
    def _delivery(entry_id: str, fields: dict[str, str] | None) -> Delivery:
        raw = (fields or {}).get(keys.CONTROL_FIELD)
        if raw is None:  # trimmed away while pending (Redis 6.2 hands such entries out empty)
            return Delivery(entry_id, None, "the request is gone from the stream")
        try:
            return Delivery(entry_id, ControlRequest.model_validate_json(raw))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(map(str, first["loc"])) or "request"
            return Delivery(entry_id, None, f"malformed request: {where}: {first['msg']}")

    def deliveries(self, block_s: float) -> list[Delivery] | None:
        """What is ours to handle: first entries handed out before and never acknowledged (this
        supervisor's or the one before it, which died), then new ones, waiting up to ``block_s``.
        None when we do not hold the seam or Redis is down (the caller waits by itself)."""
        if not self.holding:
            return None
        try:
            self._ensure_group()
            pending = self._read("0", None)
            if pending:
                return pending
            return self._read(">", max(1, int(block_s * 1000)))
        except redis.ResponseError as exc:
            if stream_gone(exc):  # the stream was deleted (a flushed Redis): make it again
                self._group_ready = False
                return []
            self._failed("reading the control stream", exc)
            return None
        except redis.RedisError as exc:
            self._failed("reading the control stream", exc)
            return None

    def answered(self, entry_id: str) -> bool:
        """Whether this entry was answered already (read again after a crash before its XACK)."""
        try:
            return bool(self.redis.exists(keys.reply(entry_id)))
        except redis.RedisError as exc:
            self._failed("checking a reply", exc)
            return False

    def answer(self, reply: ControlReply) -> bool:
        """The reply and the acknowledgement in one transaction: answered means acknowledged."""
        try:
            with self.redis.pipeline(transaction=True) as pipe:
                pipe.set(keys.reply(reply.request_id), reply.model_dump_json(), ex=keys.REPLY_TTL_S)
                pipe.xack(keys.CONTROL, keys.CONTROL_GROUP, reply.request_id)
                pipe.execute()
        except redis.RedisError as exc:
            self._failed("answering a request", exc)
            return False
        return True

    def acknowledge(self, entry_id: str) -> None:
        try:
            self.redis.xack(keys.CONTROL, keys.CONTROL_GROUP, entry_id)
        except redis.RedisError as exc:
            self._failed("acknowledging a request", exc)

    def close(self) -> None:
        self.redis.close()
