"""``CounterexamplesPlugin`` (``counterexamples``): REST ``/api/counterexamples``, the MCP tools
``counterexample_submit`` and ``counterexample_list``, the job runner's hook for ``counterexample`` jobs
and the review gate's source of confirmed regression cases.

It needs the forge (targets, regression PRs), its evidence ledger (accepted kernels) and gate, and the
job runner (confirming jobs); in a gateway without them it adds nothing.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Query, Request

from gateway.context import GatewayContext
from gateway.counterexamples.heal import heal_loop, reverified
from gateway.counterexamples.models import Counterexample, CounterexampleRequest
from gateway.counterexamples.outcome import CounterexampleOutcomes
from gateway.counterexamples.regression import ConfirmedRegressions
from gateway.counterexamples.service import CounterexampleService
from gateway.counterexamples.settings import CounterexampleSettings
from gateway.deps import AnyPrincipal
from gateway.errors import CounterexampleError
from gateway.mcp_server import GatewayMCP, caller
from gateway.plugin import Lifespan, Plugin, background
from gateway.services import EVIDENCE_LEDGER, FORGE, JOB_SERVICE, REVIEW_GATE
from kswarm_contracts.counterexample import CounterexampleInput, CounterexampleStatus

log = logging.getLogger("kswarm.counterexamples")
SERVICE_ATTR = "counterexamples"  # app.state attribute the routes read the service from


def _svc(request: Request) -> CounterexampleService:
    svc = getattr(request.app.state, SERVICE_ATTR, None)
    if not isinstance(svc, CounterexampleService):
        raise CounterexampleError("counterexamples need the forge and the job runner in this gateway", 503)
    return svc


def build_counterexample_router() -> APIRouter:
    r = APIRouter(prefix="/api/counterexamples", tags=["counterexamples"])

    @r.post(
        "",
        response_model=Counterexample,
        status_code=201,
        summary="Submit a counterexample (agents; you are the finder): queues its confirming job",
    )
    async def submit(
        body: CounterexampleRequest, request: Request, principal: AnyPrincipal
    ) -> Counterexample:
        return await _svc(request).submit(principal, body)

    @r.get("", response_model=list[Counterexample], summary="Counterexamples, newest first")
    async def list_counterexamples(
        request: Request,
        _: AnyPrincipal,
        repo: str | None = None,
        task: str | None = None,
        status: CounterexampleStatus | None = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 100,
    ) -> list[Counterexample]:
        return await _svc(request).list(repo, task, status, limit)

    @r.get("/targets", summary="A task's domain and the kernels a counterexample may target")
    async def targets(task: str, request: Request, _: AnyPrincipal) -> dict[str, Any]:
        return await _svc(request).targets(task)

    @r.get("/{cx_id}", response_model=Counterexample, summary="One counterexample")
    async def get(cx_id: str, request: Request, _: AnyPrincipal) -> Counterexample:
        return await _svc(request).get(cx_id)

    return r


def brief(cx: Counterexample) -> dict[str, Any]:
    return cx.model_dump(
        mode="json",
        include={"id", "task", "kernel", "sha", "finder", "status", "reasons", "job", "regression_pr"},
    )


def register_counterexample_tools(mcp: GatewayMCP, svc: CounterexampleService) -> None:
    @mcp.tool(
        name="counterexample_submit",
        description="Submit an input {case,dtype,seed,layouts,special} or a generator that breaks an "
        "accepted kernel at sha.",
    )
    async def counterexample_submit(
        task: str,
        kernel: str,
        sha: str,
        repo: str | None = None,
        input: CounterexampleInput | None = None,
        generator: str | None = None,
        note: str = "",
    ) -> dict[str, Any]:
        request = CounterexampleRequest(
            task=task,
            repo=repo or svc.settings.dataset_repo,
            kernel=kernel,
            sha=sha,
            input=input,
            generator=generator,
            note=note,
        )
        return brief(await svc.submit(caller(), request))

    @mcp.tool(
        name="counterexample_targets",
        description="A task's input domain (DOMAIN) and the accepted kernels (kernel, sha) you may attack.",
    )
    async def counterexample_targets(task: str) -> dict[str, Any]:
        caller()
        return await svc.targets(task)

    @mcp.tool(
        name="counterexample_list",
        description="Counterexamples (filter: task, status pending|confirmed|refused|error), newest first.",
    )
    async def counterexample_list(
        task: str | None = None, status: CounterexampleStatus | None = None, limit: int = 20
    ) -> list[dict[str, Any]]:
        caller()
        found = await svc.list(svc.settings.dataset_repo, task, status, max(1, min(limit, 100)))
        return [brief(cx) for cx in found]


class CounterexamplesPlugin(Plugin[CounterexampleSettings]):
    name = "counterexamples"
    settings_model = CounterexampleSettings
    optional = (FORGE, EVIDENCE_LEDGER, REVIEW_GATE, JOB_SERVICE)

    def install(self, app: FastAPI, ctx: GatewayContext, mcp: GatewayMCP) -> Lifespan | None:
        forge, ledger = ctx.services.find(FORGE), ctx.services.find(EVIDENCE_LEDGER)
        gate, jobs = ctx.services.find(REVIEW_GATE), ctx.services.find(JOB_SERVICE)
        if forge is None or ledger is None or gate is None or jobs is None:
            log.info("counterexamples: no forge or job runner in this gateway; not installed")
            return None
        svc = CounterexampleService(ctx, self.settings, jobs, forge, ledger)
        outcomes = CounterexampleOutcomes(ctx, self.settings, forge, svc.store)
        jobs.outcomes.final_hooks["counterexample"] = outcomes.job_finished
        gate.regressions = ConfirmedRegressions(svc.store, self.settings.dataset_repo)
        setattr(app.state, SERVICE_ATTR, svc)
        app.include_router(build_counterexample_router())
        register_counterexample_tools(mcp, svc)
        # The heal (issue 27 point 4): a regression case merged on a dataset main re-verifies its task's
        # accepted kernels; a re-verification that fails withdraws its kernel (heal.py).
        jobs.outcomes.after_final.append(partial(reverified, ctx))
        return lambda: background({"kswarm-heal": heal_loop(ctx)})
