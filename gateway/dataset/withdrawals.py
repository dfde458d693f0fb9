"""Withdrawn kernels: an accepted kernel that fails a regression case of its task (a confirmed
counterexample) leaves the accepted split, with the reason, the counterexample and the job as evidence
(issue 27, point 4). Its record stays, marked ``withdrawn``; ``kswarm dataset build`` reads these from
``GET /api/dataset/withdrawals?repo=`` and the card counts what each regression case withdrew.

Stored per repo in one Redis hash, ``ks:dataset:withdrawn:<repo>``: field ``<kernel>@<sha>`` (the
accepted commit of that kernel), value the ``Withdrawal`` as JSON. Writing one is the heal's job
(``gateway/counterexamples/``), never an agent's: no route writes it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from gateway.redis_facade import StrRedis

KEY_PREFIX = "ks:dataset:withdrawn:"


class Withdrawal(BaseModel):
    model_config = ConfigDict(extra="forbid")

    repo: str
    task: str
    kernel: str
    sha: str  # the accepted commit of the kernel that was withdrawn
    reason: str
    counterexample: str  # the regression case's id (a confirmed counterexample)
    job: str  # the re-verification job that failed it
    author: str | None = None
    at: float


def withdrawal_key(kernel: str, sha: str) -> str:
    return f"{kernel}@{sha}"


class WithdrawalStore:
    def __init__(self, redis: StrRedis) -> None:
        self.redis = redis

    async def add(self, withdrawal: Withdrawal) -> bool:
        """Record it; False when that kernel at that commit was already withdrawn (the first stays)."""
        key = KEY_PREFIX + withdrawal.repo
        field = withdrawal_key(withdrawal.kernel, withdrawal.sha)
        return bool(await self.redis.hsetnx(key, field, withdrawal.model_dump_json()))

    async def all(self, repo: str) -> list[Withdrawal]:
        raw = await self.redis.hgetall(KEY_PREFIX + repo)
        found = [Withdrawal.model_validate_json(v) for v in raw.values()]
        return sorted(found, key=lambda w: (w.at, w.kernel, w.sha))
