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

from fastapi import APIRouter, Depends, Query

from gateway.context import GatewayContext
from gateway.counterexamples.heal import heal_loop, reverified
from gateway.counterexamples.models import Counterexample, CounterexampleRequest
from gateway.counterexamples.outcome import CounterexampleOutcomes
from gateway.counterexamples.regression import ConfirmedRegressions
from gateway.counterexamples.service import CounterexampleService
from gateway.counterexamples.settings import CounterexampleSettings
from gateway.deps import AnyPrincipal, provided
from gateway.mcp_server import caller
from gateway.plugin import Contribution, McpTools, Plugin
from gateway.services import COUNTEREXAMPLES, EVIDENCE_LEDGER, FORGE, JOB_SERVICE, REVIEW_GATE
from kswarm_contracts.counterexample import CounterexampleInput, CounterexampleStatus

log = logging.getLogger("kswarm.counterexamples")
Counterexamples = Annotated[CounterexampleService, Depends(provided(COUNTEREXAMPLES))]
router = APIRouter(prefix="/api/counterexamples", tags=["counterexamples"])


@router.post(
    "",
    response_model=Counterexample,
    status_code=201,
    summary="Submit a counterexample (agents; you are the finder): queues its confirming job",
)
async def submit(
    body: CounterexampleRequest, svc: Counterexamples, principal: AnyPrincipal
) -> Counterexample:
    return await svc.submit(principal, body)


@router.get("", response_model=list[Counterexample], summary="Counterexamples, newest first")
async def list_counterexamples(
    svc: Counterexamples,
    _: AnyPrincipal,
    repo: str | None = None,
    task: str | None = None,
    status: CounterexampleStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[Counterexample]:
    return await svc.list(repo, task, status, limit)


@router.get("/targets", summary="A task's domain and the kernels a counterexample may target")
async def targets(task: str, svc: Counterexamples, _: AnyPrincipal) -> dict[str, Any]:
    return await svc.targets(task)


@router.get("/{cx_id}", response_model=Counterexample, summary="One counterexample")
async def get(cx_id: str, svc: Counterexamples, _: AnyPrincipal) -> Counterexample:
    return await svc.get(cx_id)


def brief(cx: Counterexample) -> dict[str, Any]:
    return cx.model_dump(
        mode="json",
        include={"id", "task", "kernel", "sha", "finder", "status", "reasons", "job", "regression_pr"},
    )


def counterexample_tools(svc: CounterexampleService) -> McpTools:
    tools = McpTools()

    @tools.tool(
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

    @tools.tool(
        name="counterexample_targets",
        description="A task's input domain (DOMAIN) and the accepted kernels (kernel, sha) you may attack.",
    )
    async def counterexample_targets(task: str) -> dict[str, Any]:
        caller()
        return await svc.targets(task)

    @tools.tool(
        name="counterexample_list",
        description="Counterexamples (filter: task, status pending|confirmed|refused|error), newest first.",
    )
    async def counterexample_list(
        task: str | None = None, status: CounterexampleStatus | None = None, limit: int = 20
    ) -> list[dict[str, Any]]:
        caller()
        found = await svc.list(svc.settings.dataset_repo, task, status, max(1, min(limit, 100)))
        return [brief(cx) for cx in found]

    return tools


class CounterexamplesPlugin(Plugin[CounterexampleSettings]):
    name = "counterexamples"
    settings_model = CounterexampleSettings
    provides = (COUNTEREXAMPLES,)
    requires = (FORGE, EVIDENCE_LEDGER, REVIEW_GATE, JOB_SERVICE)

    def contribute(self, ctx: GatewayContext) -> Contribution:
        forge, ledger = ctx.services.get(FORGE), ctx.services.get(EVIDENCE_LEDGER)
        gate, jobs = ctx.services.get(REVIEW_GATE), ctx.services.get(JOB_SERVICE)
        svc = CounterexampleService(ctx, self.settings, jobs, forge, ledger)
        outcomes = CounterexampleOutcomes(ctx, self.settings, forge, svc.store)
        # Wired into the services it extends: the job runner's final hooks, the gate's regression rule.
        jobs.outcomes.final_hooks["counterexample"] = outcomes.job_finished
        gate.regressions = ConfirmedRegressions(svc.store, self.settings.dataset_repo)
        # The heal (issue 27 point 4): a regression case merged on a dataset main re-verifies its task's
        # accepted kernels; a re-verification that fails withdraws its kernel (heal.py).
        jobs.outcomes.after_final.append(partial(reverified, ctx))
        return Contribution(
            services={COUNTEREXAMPLES: svc},
            routers=[router],
            tools=counterexample_tools(svc),
            background={"kswarm-heal": partial(heal_loop, ctx)},
        )
