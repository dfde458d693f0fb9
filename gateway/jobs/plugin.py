"""``jobs_plugin``: REST ``/api/jobs``, the MCP tools ``job_*`` and the reclaim loop, in the gateway.

Register with ``create_app(settings, plugins=[..., jobs_plugin])`` (after the forge plugin when there is
one: submissions resolve refs through it). Pools come from ``KSWARM_JOBS_POOLS_FILE`` (YAML/JSON, a
swarm.yaml works) or ``KSWARM_JOBS_POOLS`` (JSON), default one ``cpu`` pool.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi.responses import PlainTextResponse
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import ValidationError

from gateway.auth import current_principal, require_kind, require_operator
from gateway.context import GatewayContext
from gateway.jobs.models import (
    Assignment,
    FinishReply,
    FinishRequest,
    HeartbeatReply,
    HeartbeatRequest,
    Job,
    JobKind,
    JobRequest,
    TakeRequest,
)
from gateway.jobs.pools import JobsSettings, RuleViolation
from gateway.jobs.service import JobError, JobService
from gateway.mcp_server import caller
from gateway.principals import Principal, PrincipalKind

Caller = Annotated[Principal, Depends(current_principal)]
Worker = Annotated[Principal, Depends(require_kind(PrincipalKind.worker))]
Operator = Annotated[Principal, Depends(require_operator)]


def service_of(request: Request) -> JobService:
    return request.app.state.ctx.extras["jobs"]


Svc = Annotated[JobService, Depends(service_of)]


@contextlib.contextmanager
def http_errors() -> Any:
    try:
        yield
    except RuleViolation as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from exc
    except JobError as exc:
        raise HTTPException(status_code=exc.status, detail=str(exc)) from exc


def build_jobs_router() -> APIRouter:
    r = APIRouter(prefix="/api/jobs", tags=["jobs"])

    @r.post("", response_model=Job, status_code=201, summary="Submit a job (you are the submitter)")
    async def submit(body: JobRequest, svc: Svc, principal: Caller) -> Job:
        with http_errors():
            return await svc.submit(principal, body)

    @r.get("", response_model=list[Job], summary="Jobs, newest first (results omitted unless full)")
    async def list_jobs(
        svc: Svc,
        principal: Caller,
        pool: str | None = None,
        state: str | None = None,
        submitter: str | None = None,
        mine: bool = False,
        full: bool = False,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
    ) -> list[Job]:
        jobs = await svc.visible(
            principal, await svc.queue.list(pool, state, principal.name if mine else submitter, limit)
        )
        return jobs if full else [j.model_copy(update={"result": None}) for j in jobs]

    @r.get("/pools", summary="Pools: depth, running jobs with devices, recent results, config")
    async def pools(svc: Svc, principal: Caller) -> list[dict[str, Any]]:
        return await svc.pools_view(principal)

    @r.get("/pools/{pool}/config", summary="One pool's configuration (what workers run)")
    async def pool_config(pool: str, svc: Svc, _: Caller) -> dict[str, Any]:
        with http_errors():
            return svc.pool(pool).model_dump(mode="json")

    @r.get("/pools/{pool}/dead", summary="Dead-lettered jobs of a pool, with reasons (operators)")
    async def dead(pool: str, svc: Svc, _: Operator) -> list[dict[str, str]]:
        with http_errors():
            svc.pool(pool)
        return await svc.queue.dead_letters(pool)

    @r.post("/pools/{pool}/take", response_model=Assignment, summary="Next job for a worker (long poll)")
    async def take(pool: str, body: TakeRequest, request: Request, svc: Svc, principal: Worker) -> Any:
        with http_errors():
            assignment = await svc.take(principal, pool, body, gone=request.is_disconnected)
        return assignment if assignment is not None else Response(status_code=204)

    @r.get("/{job_id}", response_model=Job, summary="One job with its result record (if you may read it)")
    async def get(job_id: str, svc: Svc, principal: Caller) -> Job:
        with http_errors():
            return await svc.read(principal, job_id)

    @r.get("/{job_id}/logs", response_class=PlainTextResponse, summary="A job's output (capped)")
    async def logs(
        job_id: str, svc: Svc, principal: Caller, tail: Annotated[int | None, Query(ge=1)] = None
    ) -> str:
        with http_errors():
            return await svc.logs(principal, job_id, tail)

    @r.post("/{job_id}/cancel", response_model=Job, summary="Cancel (submitter or operator)")
    async def cancel(job_id: str, svc: Svc, principal: Caller) -> Job:
        with http_errors():
            return await svc.cancel(principal, job_id)

    @r.post("/{job_id}/heartbeat", response_model=HeartbeatReply, summary="Worker: still running it")
    async def heartbeat(job_id: str, body: HeartbeatRequest, svc: Svc, principal: Worker) -> HeartbeatReply:
        with http_errors():
            return await svc.heartbeat(principal, job_id, body)

    @r.post("/{job_id}/finish", response_model=FinishReply, summary="Worker: record the final state once")
    async def finish(job_id: str, body: FinishRequest, svc: Svc, principal: Worker) -> FinishReply:
        with http_errors():
            return await svc.finish(principal, job_id, body)

    return r


def _tool_error(exc: Exception) -> ToolError:
    status = getattr(exc, "status", 422 if isinstance(exc, RuleViolation) else 400)
    return ToolError(f"{exc} (HTTP {status})")


def _brief(job: Job) -> dict[str, Any]:
    out = job.model_dump(
        include={
            "id",
            "state",
            "pool",
            "task",
            "kernel",
            "repo",
            "sha",
            "devices",
            "kind",
            "attempts",
            "verdict",
            "error",
            "allocated",
            "priority",
        }
    )
    if job.result:
        out["flags"] = job.result.get("flags", [])
        out["reasons"] = job.result.get("reasons", [])
    return out


def register_job_tools(mcp: Any, svc: JobService) -> None:
    @mcp.tool(
        name="job_submit",
        description="Verify kernels/<task>/<file>.py (as the task its dir names) at repo@ref.",
    )
    async def job_submit(
        kernel: str,
        task: str | None = None,
        ref: str = "main",
        repo: str | None = None,
        pool: str = "cpu",
        devices: int | None = None,
        kind: JobKind = "verify",
        timeout_s: int | None = None,
        reproduce_pr: int | None = None,
    ) -> dict[str, Any]:
        try:
            request = JobRequest(
                task=task,
                kernel=kernel,
                ref=ref,
                repo=repo,
                pool=pool,
                devices=devices,
                kind=kind,
                timeout_s=timeout_s,
                reproduce_pr=reproduce_pr,
            )
            return _brief(await svc.submit(caller(), request))
        except (JobError, RuleViolation, ValidationError) as exc:
            raise _tool_error(exc) from exc

    @mcp.tool(name="job_status", description="A job's state and verdict; without id, your recent jobs.")
    async def job_status(id: str | None = None, limit: int = 10) -> dict[str, Any]:
        if id is None:
            jobs = await svc.queue.list(submitter=caller().name, limit=max(1, min(limit, 50)))
            return {"jobs": [_brief(j) for j in jobs]}
        try:
            return _brief(await svc.read(caller(), id))
        except JobError as exc:
            raise _tool_error(exc) from exc

    @mcp.tool(name="job_logs", description="The end of a job's output (tail characters).")
    async def job_logs(id: str, tail: int = 4000) -> str:
        try:
            return await svc.logs(caller(), id, max(1, min(tail, 100_000)))
        except JobError as exc:
            raise _tool_error(exc) from exc

    @mcp.tool(name="job_cancel", description="Cancel one of your jobs.")
    async def job_cancel(id: str) -> dict[str, Any]:
        try:
            return _brief(await svc.cancel(caller(), id))
        except JobError as exc:
            raise _tool_error(exc) from exc


def jobs_plugin(
    app: FastAPI, ctx: GatewayContext, mcp: Any, settings: JobsSettings | None = None
) -> Callable[[], AbstractAsyncContextManager[None]]:
    settings = settings or JobsSettings()
    svc = JobService(ctx, settings, settings.pool_list())
    ctx.metrics.refreshers.append(svc.refresh_metrics)
    ctx.extras["jobs"] = svc
    app.include_router(build_jobs_router())
    register_job_tools(mcp, svc)

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        task = asyncio.create_task(svc.reclaim_loop(), name="kswarm-jobs-reclaim")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return lifespan
