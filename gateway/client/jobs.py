"""The worker's side of ``/api/jobs`` (take, heartbeat, finish, pool config), as the worker principal.

``finish`` is the only call a worker makes about a result: the gateway records it and then derives the
verification evidence, the commit statuses and the submitter's notice itself (``outcomes.py``).
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from gateway.jobs.models import (
    Assignment,
    FinishReply,
    FinishRequest,
    HeartbeatReply,
    HeartbeatRequest,
    TakeRequest,
)
from gateway.jobs.pools import PoolConfig

log = logging.getLogger("kswarm.jobs.worker")


class ConflictError(RuntimeError):
    """The gateway answered 409 (e.g. another worker serves this node)."""


class JobsClient:
    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def _json(self, method: str, path: str, body: Any = None, limit_s: float = 60) -> Any:
        reply = await self.http.request(method, path, json=body, timeout=limit_s)
        if reply.status_code == 409:
            raise ConflictError(reply.json().get("detail", reply.text))
        reply.raise_for_status()
        return reply.json() if reply.status_code != 204 else None

    async def pool_config(self, pool: str) -> PoolConfig:
        return PoolConfig.model_validate(await self._json("GET", f"/api/jobs/pools/{pool}/config"))

    async def take(self, pool: str, request: TakeRequest) -> Assignment | None:
        data = await self._json(
            "POST", f"/api/jobs/pools/{pool}/take", request.model_dump(), limit_s=request.wait_s + 30
        )
        return Assignment.model_validate(data) if data else None

    async def heartbeat(self, job_id: str, request: HeartbeatRequest) -> HeartbeatReply:
        return HeartbeatReply.model_validate(
            await self._json("POST", f"/api/jobs/{job_id}/heartbeat", request.model_dump())
        )

    async def finish(self, job_id: str, request: FinishRequest) -> FinishReply:
        return FinishReply.model_validate(
            await self._json("POST", f"/api/jobs/{job_id}/finish", request.model_dump(mode="json"))
        )
