"""An agent's session with the gateway, whatever runs its wakes (``agents.loop`` or ``agents.claude_code``):
the client, who the token says we are, and blocking on the inbox until something arrives.

Both runtimes import this module; neither imports the other's internals (``loop`` only dispatches to
``claude_code`` by name). The gateway is reached through ``gateway.client`` only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from agents.config import AgentConfig
from agents.prompt import Identity
from gateway.client import AsyncGatewayClient, GatewayCallError

log = logging.getLogger("kswarm.agent")
T = TypeVar("T")


async def retrying(what: str, call: Callable[[], Awaitable[T]], ceiling: float) -> T:
    """``call()`` until it succeeds, backing off (gateway not up yet, token revoked, ...)."""
    delay = 0.2
    while True:
        try:
            return await call()
        except Exception as exc:  # anything transient: unreachable, not up yet, revoked
            log.warning("%s failed (retrying in %.1fs): %s", what, delay, exc)
        await asyncio.sleep(delay)
        delay = min(delay * 2, ceiling)


def quiet_http_logs() -> None:
    """HTTP clients log every request at INFO: each heartbeat, inbox wait and timeline post would be a
    line (two thirds of an agent's log were heartbeats). Their failures still reach the log through the
    callers' own warnings; ``agents.pulse`` logs a rate-limited heartbeat line instead."""
    for name in ("httpx", "httpx2", "httpcore", "mcp.client.streamable_http"):
        logging.getLogger(name).setLevel(logging.WARNING)


def gateway_client(config: AgentConfig) -> AsyncGatewayClient:
    """The agent's client: its own token, over the socket (containers) or TCP."""
    return AsyncGatewayClient(config.gateway_target())


async def identify(gateway: AsyncGatewayClient, config: AgentConfig) -> Identity:
    """Who the gateway says we are; a mismatch with the configured name is logged, the server wins."""
    me = await retrying("identify (GET /api/me)", gateway.me, config.heartbeat_s)
    if me["name"] != config.name:
        log.warning(
            "configured as %s but the token is %s's: acting as %s", config.name, me["name"], me["name"]
        )
    return Identity(name=me["name"], email=me["email"])


def prepare_dirs(config: AgentConfig) -> None:
    for path in (config.work_dir, config.memory_dir, config.history_dir):
        Path(path).mkdir(parents=True, exist_ok=True)


HANDLED_FILE = "inbox.handled"  # in the history dir: the id of the last inbox item a wake handled


class Inbox:
    """The agent's inbox, delivered at least once and handled at most once.

    Items are fetched without moving the gateway's cursor (``ack=false``); after a wake has handled
    them, their last id is written to ``<history>/inbox.handled`` and then acknowledged
    (``POST /api/inbox/ack``). An agent frozen or killed before the acknowledgement gets the same
    items again after its restart, and skips those the file says it already handled: nothing lost
    (a DM answered while the agent was stopped), nothing handled twice.
    """

    def __init__(self, gateway: AsyncGatewayClient, config: AgentConfig) -> None:
        self.gateway = gateway
        self.config = config
        self.path = Path(config.history_dir) / HANDLED_FILE

    def last_handled(self) -> tuple[int, int]:
        try:
            return _id_order(self.path.read_text().strip())
        except (OSError, ValueError):
            return (0, 0)

    async def next(self) -> list[dict[str, Any]]:
        """Block (server-side waits, no polling) until an item not yet handled arrives; wait out
        outages and a revoked token (quarantine: the orchestrator acts, the agent keeps quiet)."""
        delay = 0.5
        while True:
            try:
                items = await self.gateway.inbox(wait=self.config.inbox_wait_s, ack=False)
                delay = 0.5
            except GatewayCallError as exc:
                log.warning("inbox: %s", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, max(self.config.heartbeat_s, 1.0))
                continue
            done = self.last_handled()
            fresh = [i for i in items if _id_order(str(i.get("id", ""))) > done]
            if fresh:
                return fresh
            if items:  # handled before a crash, never acknowledged: acknowledge now
                await self._ack(str(items[-1]["id"]))

    async def handled(self, items: list[dict[str, Any]]) -> None:
        """``items`` were handled: remember it (first, on disk), then tell the gateway."""
        if not items:
            return
        last = str(items[-1]["id"])
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(last + "\n")
        tmp.replace(self.path)
        await self._ack(last)

    async def _ack(self, through: str) -> None:
        try:
            await self.gateway.inbox_ack(through)
        except GatewayCallError as exc:  # the file already says handled: the next fetch acknowledges
            log.warning("inbox ack: %s", exc)


def _id_order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)
