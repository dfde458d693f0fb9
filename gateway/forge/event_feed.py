"""The forge's events on ``ks:forge:events`` (a push, a review, a status, a merge): what the gate and
anyone tailing the forge wake on. Both forges, the gate's ledger and the Gitea webhook write them."""

from __future__ import annotations

import time
from typing import Any

from gateway.forge import keys
from gateway.redis_facade import StrRedis

EVENTS_MAXLEN = 100_000


async def emit_event(redis: StrRedis, type_: str, repo: str, **fields: Any) -> str:
    """Append a forge event for the gate (and anyone tailing ``ks:forge:events``)."""
    return await redis.xadd(
        keys.EVENTS, event_fields(type_, repo, **fields), maxlen=EVENTS_MAXLEN, approximate=True
    )


def event_fields(type_: str, repo: str, **fields: Any) -> dict[str, str]:
    flat = {"type": type_, "repo": repo, "ts": repr(time.time())}
    flat.update({k: "" if v is None else str(v) for k, v in fields.items()})
    return flat
