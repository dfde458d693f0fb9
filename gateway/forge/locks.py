"""One writer at a time per protected branch: the gate's merges and the server-side seeding.

A Redis lock per (repo, branch) (``ks:forge:lock:<repo>:<branch>``) with a TTL and a token, released
only by its holder. The gate merges under it (across gate instances) and seeding checks "the branch
holds only its initial commit" and commits under it, so no merge can land between the check and the
commit even on Gitea, whose API cannot compare and swap a branch head.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator

from gateway.forge import keys
from gateway.redis_facade import StrRedis

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


@contextlib.asynccontextmanager
async def branch_lock(
    redis: StrRedis, repo: str, branch: str, ttl_ms: int = 60_000, wait_s: float = 30.0
) -> AsyncIterator[None]:
    key, token = keys.merge_lock(repo, branch), uuid.uuid4().hex
    deadline = time.monotonic() + wait_s
    while not await redis.set(key, token, nx=True, px=ttl_ms):
        if time.monotonic() > deadline:
            raise TimeoutError(f"lock {key} busy for {wait_s}s")
        await asyncio.sleep(0.05)
    try:
        yield
    finally:
        await redis.eval(_RELEASE, 1, key, token)
