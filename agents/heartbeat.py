"""The agent's liveness loop: heartbeat to the gateway, then wait on the inbox, forever.

The agent-runtime issue puts the model loop where ``on_items`` is called; until then inbox items are
only appended to the history dir, so an operator can see that the agent received them.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.gateway_client import GatewayClient, GatewayError, GatewayTarget


@dataclass(frozen=True)
class AgentEnv:
    """What the orchestrator hands an agent, read from its (allow-listed) environment."""

    name: str
    target: GatewayTarget
    heartbeat_s: float
    history: Path | None

    @classmethod
    def from_environ(cls, environ: dict[str, str] | None = None) -> AgentEnv:
        env = dict(os.environ if environ is None else environ)
        token_file = env.get("KSWARM_TOKEN_FILE")
        token = Path(token_file).read_text().strip() if token_file else None
        socket = env.get("KSWARM_GATEWAY_SOCKET")
        return cls(
            name=env.get("KSWARM_AGENT", "agent"),
            target=GatewayTarget(
                token=token,
                url=None if socket else env.get("KSWARM_GATEWAY_URL"),
                socket=Path(socket) if socket else None,
            ),
            heartbeat_s=float(env.get("KSWARM_HEARTBEAT_S", "5")),
            history=Path(env["KSWARM_HISTORY"]) if env.get("KSWARM_HISTORY") else None,
        )


def log(msg: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {msg}", flush=True)


def record_items(history: Path | None, items: list[dict[str, Any]]) -> None:
    if history is None:
        return
    with open(history / "inbox.jsonl", "a") as fh:
        for item in items:
            fh.write(json.dumps(item) + "\n")


def run(env: AgentEnv, on_items: Callable[[list[dict[str, Any]]], None] | None = None) -> None:
    """Heartbeat, then long-poll the inbox for one heartbeat period; repeat; wait out gateway outages."""
    delay = 0.5
    with GatewayClient(env.target) as client:
        log(f"agent {env.name} up; gateway {env.target.socket or env.target.url}")
        while True:
            try:
                client.heartbeat("idle", "waiting for messages")
                items = client.inbox(wait=env.heartbeat_s)
                delay = 0.5
            except GatewayError as exc:
                # 401 = token revoked (quarantine): keep quiet and wait for the orchestrator to act.
                log(f"gateway error: {exc}")
                time.sleep(delay)
                delay = min(delay * 2, env.heartbeat_s)
                continue
            if items:
                log(
                    f"{len(items)} inbox item(s): "
                    + ", ".join(f"{i['reason']} from {i['sender']}" for i in items)
                )
                record_items(env.history, items)
                if on_items is not None:
                    on_items(items)
