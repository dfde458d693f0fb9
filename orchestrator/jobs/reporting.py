"""Where a worker reports a finished job: the gateway (as the worker principal) over HTTP.

``JobsClient`` is the worker side of ``/api/jobs`` (take, heartbeat, finish, pool config);
``Reporter`` is the protocol for what happens once a result is recorded: the commit status
``kswarm/<kind>:<pool>`` on the sha (Gitea-style ``POST /api/v1/repos/{o}/{r}/statuses/{sha}``, which
only worker principals may call), a chat DM to the submitter, and for review reproductions a ledger
entry in the forge. ``GatewayReporter`` does all three with the worker's token.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import httpx

from orchestrator.jobs.models import (
    Assignment,
    FinishReply,
    FinishRequest,
    HeartbeatReply,
    HeartbeatRequest,
    TakeRequest,
)
from orchestrator.jobs.pools import PoolConfig

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


class Reporter(Protocol):
    async def commit_status(
        self, repo: str, sha: str, state: str, context: str, description: str
    ) -> None: ...

    async def notify(self, submitter: str, text: str) -> None: ...

    async def reproduction(self, repo: str, sha: str, reviewer: str, passed: bool, job_id: str) -> None: ...


class GatewayReporter:
    """Reports through the gateway with the worker's token; failures are logged, never raised."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def _post(self, what: str, path: str, body: dict[str, Any]) -> bool:
        try:
            reply = await self.http.post(path, json=body, timeout=30)
        except httpx.HTTPError as exc:
            log.warning("%s failed: %s", what, exc)
            return False
        if reply.status_code >= 400:
            log.warning("%s refused: %s %s", what, reply.status_code, reply.text[:300])
            return False
        return True

    async def commit_status(self, repo: str, sha: str, state: str, context: str, description: str) -> None:
        await self._post(
            "commit status",
            f"/api/v1/repos/{repo}/statuses/{sha}",
            {"state": state, "context": context, "description": description[:140]},
        )

    async def notify(self, submitter: str, text: str) -> None:
        await self._post("notice", f"/api/dms/{submitter}/messages", {"text": text})

    async def reproduction(self, repo: str, sha: str, reviewer: str, passed: bool, job_id: str) -> None:
        await self._post(
            "reproduction",
            f"/api/forge/repos/{repo}/reproductions/{sha}",
            {"reviewer": reviewer, "passed": passed, "job_id": job_id},
        )
