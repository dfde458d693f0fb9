"""``TasksPlugin`` (``tasks``): the task board's MCP tools, REST under ``/api/tasks`` and the lease sweeper.

Provides the task board. Uses the forge when there is one (seeding the dataset repo needs it; the board
works without). The claimant is always the caller's principal (``caller()`` in tools, the route's
principal dependency in REST), never a request field.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response

from gateway.context import GatewayContext
from gateway.deps import AnyPrincipal, OperatorOnly, provided
from gateway.errors import BadRequest, NotFound
from gateway.mcp_server import caller
from gateway.plugin import Contribution, McpTools, Plugin
from gateway.services import FORGE, TASK_BOARD
from gateway.tasks.definitions import add_task, task_definition
from gateway.tasks.models import (
    TASK_ID_PATTERN,
    AddTaskBody,
    BoardTask,
    DoneBody,
    SeedBody,
    TaskDefinition,
    TaskSpec,
    TasksSettings,
)
from gateway.tasks.seeding import seed_dataset
from gateway.tasks.service import BoardService

Svc = Annotated[BoardService, Depends(provided(TASK_BOARD))]


router = APIRouter(prefix="/api/tasks", tags=["tasks"])


@router.get("", response_model=list[BoardTask], summary="The board: every task with its state")
async def list_tasks(
    svc: Svc,
    _: AnyPrincipal,
    state: Annotated[str | None, Query(description="open, claimed, done")] = None,
) -> list[BoardTask]:
    return await svc.board.list(state)


@router.post("", response_model=BoardTask, status_code=201, summary="Post a task (operators, lead agents)")
async def post(spec: TaskSpec, svc: Svc, who: AnyPrincipal) -> BoardTask:
    return await svc.post(who, spec)


@router.get("/leads", summary="Agents allowed to post tasks")
async def leads(svc: Svc, _: AnyPrincipal) -> list[str]:
    return sorted(set(svc.settings.leads) | await svc.board.leads())


@router.put("/leads/{name}", status_code=204, summary="Let an agent post tasks (operators)")
async def add_lead(name: str, svc: Svc, _: OperatorOnly) -> Response:
    if await svc.ctx.principals.get(name) is None:
        raise NotFound(f"unknown principal {name!r}")
    await svc.board.add_lead(name)
    return Response(status_code=204)


@router.delete("/leads/{name}", status_code=204, summary="Stop an agent posting tasks (operators)")
async def remove_lead(name: str, svc: Svc, _: OperatorOnly) -> Response:
    await svc.board.remove_lead(name)
    return Response(status_code=204)


@router.post("/seed", summary="Seed the dataset repo from the catalogue and post its tasks (operators)")
async def seed(body: SeedBody, svc: Svc, who: OperatorOnly) -> dict[str, Any]:
    return await seed_dataset(svc, who, body)


@router.post("/definitions", status_code=201, summary="Propose a task definition as a PR (operators)")
async def add_definition(body: AddTaskBody, svc: Svc, who: OperatorOnly) -> dict[str, Any]:
    """``kswarm tasks add DIR``: task.py on a new branch of the dataset repo and a PR into main."""
    return await add_task(svc.ctx, who, body, svc.settings.dataset_repo)


@router.get(
    "/{task_id}/definition",
    response_model=TaskDefinition,
    summary="A job's task definition: the dataset repo's protected main, else the catalogue",
)
async def definition(
    task_id: str,
    svc: Svc,
    _: AnyPrincipal,
    repo: Annotated[str | None, Query(description="org/name (default: the dataset repo)")] = None,
    content: Annotated[bool, Query(description="false: only where it is and its blob sha")] = True,
) -> TaskDefinition:
    if not re.fullmatch(TASK_ID_PATTERN.strip("^$"), task_id):
        raise BadRequest(f"bad task id {task_id!r}")
    forge = svc.ctx.services.find(FORGE)
    return await task_definition(forge, repo or svc.settings.dataset_repo, task_id, content)


@router.get("/{task_id}", response_model=BoardTask, summary="One task")
async def get(task_id: str, svc: Svc, _: AnyPrincipal) -> BoardTask:
    return await svc.board.get(task_id)


@router.delete("/{task_id}", status_code=204, summary="Remove a task (operators)")
async def delete(task_id: str, svc: Svc, _: OperatorOnly) -> Response:
    await svc.board.delete(task_id)
    return Response(status_code=204)


@router.post("/{task_id}/claim", response_model=BoardTask, summary="Claim (you hold a lease; 409 if taken)")
async def claim(task_id: str, svc: Svc, who: AnyPrincipal) -> BoardTask:
    return await svc.claim(who, task_id)


@router.post("/{task_id}/renew", response_model=BoardTask, summary="Renew your claim's lease")
async def renew(task_id: str, svc: Svc, who: AnyPrincipal) -> BoardTask:
    return await svc.renew(who, task_id)


@router.post("/{task_id}/release", response_model=BoardTask, summary="Give your claim up (operators: any)")
async def release(task_id: str, svc: Svc, who: AnyPrincipal) -> BoardTask:
    return await svc.release(who, task_id)


@router.post("/{task_id}/done", response_model=BoardTask, summary="Mark your claimed task done")
async def done(task_id: str, body: DoneBody, svc: Svc, who: AnyPrincipal) -> BoardTask:
    return await svc.done(who, task_id, body.result)


def _brief(task: BoardTask) -> dict[str, Any]:
    return task.model_dump(include={"id", "title", "state", "holder", "expires_at", "labels", "repo"})


def task_tools(svc: BoardService) -> McpTools:
    tools = McpTools()

    @tools.tool(
        name="task_list", description="Tasks on the board (state: open|claimed|done|all), with holders."
    )
    async def task_list(state: str = "open") -> list[dict[str, Any]]:
        caller()
        return [_brief(t) for t in await svc.board.list(state)]

    @tools.tool(
        name="task_claim",
        description="Claim a task: a lease in your name; renew it while you work (at most a few at once).",
    )
    async def task_claim(id: str) -> dict[str, Any]:
        return (await svc.claim(caller(), id)).model_dump()

    @tools.tool(name="task_renew", description="Renew your claim's lease (heartbeats also renew it).")
    async def task_renew(id: str) -> dict[str, Any]:
        return _brief(await svc.renew(caller(), id))

    @tools.tool(name="task_release", description="Give up your claim; the task is open again.")
    async def task_release(id: str) -> dict[str, Any]:
        return _brief(await svc.release(caller(), id))

    @tools.tool(
        name="task_done",
        description="Mark your claimed task done once the gate merged your kernel's PR (e.g. 'PR #4').",
    )
    async def task_done(id: str, result: str = "") -> dict[str, Any]:
        return _brief(await svc.done(caller(), id, result[:2000]))

    @tools.tool(name="task_post", description="Post a task to the board (lead agents and operators).")
    async def task_post(
        id: str, title: str, description: str = "", labels: list[str] | None = None
    ) -> dict[str, Any]:
        spec = TaskSpec(id=id, title=title, description=description, labels=labels or [])
        return _brief(await svc.post(caller(), spec))

    return tools


class TasksPlugin(Plugin[TasksSettings]):
    name = "tasks"
    settings_model = TasksSettings
    provides = (TASK_BOARD,)
    optional = (FORGE,)

    def contribute(self, ctx: GatewayContext) -> Contribution:
        svc = BoardService(ctx, self.settings)

        @contextlib.asynccontextmanager
        async def lifespan() -> AsyncIterator[None]:
            await svc.bot()
            yield

        return Contribution(
            services={TASK_BOARD: svc},
            routers=[router],
            tools=task_tools(svc),
            background={"kswarm-tasks-sweeper": svc.sweeper},
            lifespan=lifespan,
        )
