"""Where verification records live: one Redis hash per (repo, sha), keyed by job id.

Written only by the job runner inside the gateway (``EvidenceLedger.record``); read by the gate, the PR
views and ``pr why``. Every write emits a ``verification`` forge event, so the gate re-decides the PRs
whose head is that sha and republishes their statuses.
"""

from __future__ import annotations

from gateway.forge import keys
from gateway.forge.event_feed import emit_event
from gateway.forge.gate.evidence import PENDING_STATES, Verification, implied_evidence
from gateway.redis_facade import StrRedis


class EvidenceLedger:
    """Verification records per (repo, sha) in one Redis hash, keyed by job id."""

    def __init__(self, redis: StrRedis) -> None:
        self.redis = redis
        # Pools whose passes prove device-verified (the job runner names them when it starts,
        # ``JobService``): how a record written before evidence levels existed reads. Any other pool's
        # old pass reads as the weakest cpu pass, so an unknown pool fails closed.
        self.device_pools: frozenset[str] = frozenset()

    async def record(self, verification: Verification) -> None:
        """Store (or update) a job's record and tell the gate; idempotent for the same record."""
        key = keys.verifications(verification.repo, verification.sha)
        await self.redis.hset(key, verification.job_id, verification.model_dump_json())
        await emit_event(
            self.redis,
            "verification",
            verification.repo,
            sha=verification.sha,
            kernel=verification.kernel,
            job=verification.job_id,
            state=verification.state,
        )

    async def forget(self, repo: str, sha: str, job_id: str) -> None:
        """Drop a record whose job was never accepted (e.g. the queue refused it)."""
        await self.redis.hdel(keys.verifications(repo, sha), job_id)

    async def for_sha(self, repo: str, sha: str) -> list[Verification]:
        raw = await self.redis.hgetall(keys.verifications(repo, sha))
        records = [Verification.model_validate_json(v) for v in raw.values()]
        for r in records:
            if r.evidence is None and r.state not in PENDING_STATES:
                r.evidence = implied_evidence(r.state, r.verdict, r.pool in self.device_pools)
        return sorted(records, key=lambda r: (r.ts, r.job_id))
