"""The worker's side of ``/api/jobs`` (take, heartbeat, finish, pool config), as the worker principal.

``finish`` is the only call a worker makes about a result: the gateway records it and then derives the
verification evidence, the commit statuses and the submitter's notice itself (``outcomes.py``).

The job runner's wire models live beside it (``models``: jobs and the worker's calls; ``pools``: a pool's
configuration; ``executors``: each executor kind's options; ``kernel_paths``: which task a kernel path
names): the gateway's job runner imports them from here, and nothing here imports the server. Agents do
not use this package (``gateway.client`` does not import it). Errors are the client's (a 409, e.g.
another worker serving this node, is ``Conflict``).
"""

from __future__ import annotations

from typing import Any

from gateway.client.errors import Conflict
from gateway.client.http import AsyncGatewayClient
from gateway.client.jobs.models import (
    Assignment,
    FinishReply,
    FinishRequest,
    HeartbeatReply,
    HeartbeatRequest,
    TakeRequest,
)
from gateway.client.jobs.pools import PoolConfig

__all__ = ["Conflict", "JobsClient"]


class JobsClient:
    def __init__(self, gateway: AsyncGatewayClient) -> None:
        self.gateway = gateway

    async def _json(self, method: str, path: str, body: Any = None, limit_s: float = 60) -> Any:
        return await self.gateway.request(method, path, json=body, timeout=limit_s)

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
