"""``JobsPlugin`` (``jobs``): REST ``/api/jobs``, the MCP tools ``job_*`` and the reclaim loop.

Provides the job service. Uses the forge when there is one (submissions resolve refs and check kernels
through it, reproductions read their PR, finished jobs leave evidence in its ledger); without it a job
names its repo and a full sha. Pools come from ``KSWARM_JOBS_POOLS_FILE`` (YAML/JSON, a swarm.yaml
works) or ``KSWARM_JOBS_POOLS`` (JSON), default one ``cpu`` pool.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import PlainTextResponse

from gateway.client.jobs.models import (
    Assignment,
    FinishReply,
    FinishRequest,
    HeartbeatReply,
    HeartbeatRequest,
    Job,
    JobRequest,
    SubmittableKind,
    TakeRequest,
    WorkerToken,
)
from gateway.context import GatewayContext
from gateway.deps import AnyPrincipal, OperatorOnly, WorkerOnly, provided
from gateway.jobs.service import JobService
from gateway.jobs.settings import JobsSettings
from gateway.mcp_server import caller
from gateway.plugin import Contribution, McpTools, Plugin
from gateway.services import EVIDENCE_LEDGER, FORGE, FORGE_SETTINGS, JOB_SERVICE

Svc = Annotated[JobService, Depends(provided(JOB_SERVICE))]


router = APIRouter(prefix="/api/jobs", tags=["jobs"])


@router.post("", response_model=Job, status_code=201, summary="Submit a job (you are the submitter)")
async def submit(body: JobRequest, svc: Svc, principal: AnyPrincipal) -> Job:
    return await svc.submit(principal, body)


@router.get("", response_model=list[Job], summary="Jobs, newest first (results omitted unless full)")
async def list_jobs(
    svc: Svc,
    principal: AnyPrincipal,
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


@router.get("/pools", summary="Pools: depth, running jobs with devices, recent results, config")
async def pools(svc: Svc, principal: AnyPrincipal) -> list[dict[str, Any]]:
    return await svc.pools_view(principal)


@router.get("/pools/{pool}/config", summary="One pool's configuration (what workers run)")
async def pool_config(pool: str, svc: Svc, _: AnyPrincipal) -> dict[str, Any]:
    return svc.pool(pool).model_dump(mode="json")


@router.get("/pools/{pool}/dead", summary="Dead-lettered jobs of a pool, with reasons (operators)")
async def dead(pool: str, svc: Svc, _: OperatorOnly) -> list[dict[str, str]]:
    svc.pool(pool)
    return await svc.queue.dead_letters(pool)


@router.post(
    "/pools/{pool}/workers",
    response_model=WorkerToken,
    summary="A token for a worker of this pool (operators): its principal serves this pool only",
)
async def worker_token(pool: str, svc: Svc, _: OperatorOnly) -> WorkerToken:
    return await svc.workers.provision(svc.pool(pool))


@router.delete(
    "/pools/{pool}/leases/{node}",
    summary="Release a node whose worker is known dead (operators), so that its successor serves it now",
)
async def release_lease(pool: str, node: str, svc: Svc, _: OperatorOnly) -> dict[str, Any]:
    svc.pool(pool)
    return {"pool": pool, "node": node, "holder": await svc.queue.release_lease(pool, node)}


@router.post("/pools/{pool}/take", response_model=Assignment, summary="Next job for a worker (long poll)")
async def take(pool: str, body: TakeRequest, request: Request, svc: Svc, principal: WorkerOnly) -> Any:
    assignment = await svc.take(principal, pool, body, gone=request.is_disconnected)
    return assignment if assignment is not None else Response(status_code=204)


@router.get("/{job_id}", response_model=Job, summary="One job with its result record (if you may read it)")
async def get(job_id: str, svc: Svc, principal: AnyPrincipal) -> Job:
    return await svc.read(principal, job_id)


@router.get("/{job_id}/logs", response_class=PlainTextResponse, summary="A job's output (capped)")
async def logs(
    job_id: str, svc: Svc, principal: AnyPrincipal, tail: Annotated[int | None, Query(ge=1)] = None
) -> str:
    return await svc.logs(principal, job_id, tail)


@router.post("/{job_id}/cancel", response_model=Job, summary="Cancel (submitter or operator)")
async def cancel(job_id: str, svc: Svc, principal: AnyPrincipal) -> Job:
    return await svc.cancel(principal, job_id)


@router.post("/{job_id}/heartbeat", response_model=HeartbeatReply, summary="Worker: still running it")
async def heartbeat(job_id: str, body: HeartbeatRequest, svc: Svc, principal: WorkerOnly) -> HeartbeatReply:
    return await svc.heartbeat(principal, job_id, body)


@router.post("/{job_id}/finish", response_model=FinishReply, summary="Worker: record the final state once")
async def finish(job_id: str, body: FinishRequest, svc: Svc, principal: WorkerOnly) -> FinishReply:
    return await svc.finish(principal, job_id, body)


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


def job_tools(svc: JobService) -> McpTools:
    tools = McpTools()

    @tools.tool(
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
        kind: SubmittableKind = "verify",
        timeout_s: int | None = None,
        reproduce_pr: int | None = None,
    ) -> dict[str, Any]:
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

    @tools.tool(name="job_status", description="A job's state and verdict; without id, your recent jobs.")
    async def job_status(id: str | None = None, limit: int = 10) -> dict[str, Any]:
        if id is None:
            jobs = await svc.queue.list(submitter=caller().name, limit=max(1, min(limit, 50)))
            return {"jobs": [_brief(j) for j in jobs]}
        return _brief(await svc.read(caller(), id))

    @tools.tool(name="job_logs", description="The end of a job's output (tail characters).")
    async def job_logs(id: str, tail: int = 4000) -> str:
        return await svc.logs(caller(), id, max(1, min(tail, 100_000)))

    @tools.tool(name="job_cancel", description="Cancel one of your jobs.")
    async def job_cancel(id: str) -> dict[str, Any]:
        return _brief(await svc.cancel(caller(), id))

    return tools


class JobsPlugin(Plugin[JobsSettings]):
    name = "jobs"
    settings_model = JobsSettings
    provides = (JOB_SERVICE,)
    optional = (FORGE, FORGE_SETTINGS, EVIDENCE_LEDGER)

    def contribute(self, ctx: GatewayContext) -> Contribution:
        svc = JobService(ctx, self.settings, self.settings.pool_list())
        ctx.metrics.refreshers.append(svc.refresh_metrics)
        return Contribution(
            services={JOB_SERVICE: svc},
            routers=[router],
            tools=job_tools(svc),
            background={"kswarm-jobs-reclaim": svc.reclaim_loop},
        )
