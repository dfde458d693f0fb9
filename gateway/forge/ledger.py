"""Reproductions: which reviewer verified which sha with a passing job (the optional reproduction rule).

The job runner calls ``record`` (in-process via ``ctx.extras["forge_ledger"]``, or through
``POST /api/forge/repos/{org}/{repo}/reproductions/{sha}`` as a worker) when a verification job that
a reviewer submitted on a sha finishes; the gate reads ``passed_by``.
"""

from __future__ import annotations

import json
import time

from redis.asyncio import Redis

from gateway.forge import keys
from gateway.forge.store import emit_event


class ReproductionLedger:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def record(self, repo: str, sha: str, reviewer: str, passed: bool, job_id: str = "") -> None:
        """Reviewer ``reviewer`` reproduced ``sha`` of ``repo`` (org/name): passed or not. Last one wins."""
        entry = json.dumps({"passed": passed, "job_id": job_id, "ts": time.time()})
        await self.redis.hset(keys.reproductions(repo, sha), reviewer, entry)
        await emit_event(self.redis, "reproduction", repo, sha=sha, reviewer=reviewer, passed=int(passed))

    async def results(self, repo: str, sha: str) -> dict[str, bool]:
        raw = await self.redis.hgetall(keys.reproductions(repo, sha))
        return {name: bool(json.loads(v).get("passed")) for name, v in raw.items()}
