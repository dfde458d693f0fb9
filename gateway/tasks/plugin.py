"""``tasks_plugin``: the task board's MCP tools, REST under ``/api/tasks`` and the lease sweeper.

Register after the forge plugin (seeding the dataset repo uses it):
``create_app(settings, plugins=[forge_plugin, ..., tasks_plugin])``. The claimant is always the
caller's principal (``caller()`` in tools, ``current_principal`` in REST), never a request field.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, Response
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import ValidationError

from gateway import keys as gateway_keys
from gateway.auth import current_principal, require_operator
from gateway.context import GatewayContext
from gateway.mcp_server import caller
from gateway.principals import Principal, PrincipalKind
from gateway.tasks.board import BoardError, TaskBoard
from gateway.tasks.models import BoardTask, DoneBody, SeedBody, TaskSpec, TasksSettings
from gateway.tasks.seeding import seed_dataset

log = logging.getLogger("kswarm.tasks")

Caller = Annotated[Principal, Depends(current_principal)]
Operator = Annotated[Principal, Depends(require_operator)]
CLAIMANTS = (PrincipalKind.agent, PrincipalKind.operator)


class BoardService:
    """The board plus who may do what, announcements and the background sweeper."""

    def __init__(self, ctx: GatewayContext, settings: TasksSettings) -> None:
        self.ctx = ctx
        self.settings = settings
        self.board = TaskBoard(ctx.redis, settings.claim_ttl_s)
        self._bot: Principal | None = None

    # -- permissions ------------------------------------------------------------------------

    async def check_poster(self, who: Principal) -> None:
        if who.kind == PrincipalKind.operator:
            return
        if who.kind == PrincipalKind.agent and (
            who.name in self.settings.leads or who.name in await self.board.leads()
        ):
            return
        raise BoardError(f"{who.name} may not post tasks (operators and lead agents may)", 403)

    @staticmethod
    def check_claimant(who: Principal) -> None:
        if who.kind not in CLAIMANTS:
            raise BoardError(f"a {who.kind.value} does not claim tasks", 403)

    # -- actions (identity from the token) --------------------------------------------------

    async def post(self, who: Principal, spec: TaskSpec) -> BoardTask:
        await self.check_poster(who)
        if spec.repo is None:
            spec = spec.model_copy(update={"repo": self.settings.dataset_repo})
        task = await self.board.post(spec, who.name)
        await self.announce(f"New task on the board: `{task.id}` — {task.title} (task_claim to take it).")
        return task

    async def claim(self, who: Principal, task_id: str) -> BoardTask:
        self.check_claimant(who)
        task, _ = await self.board.claim(task_id, who.name)
        return task

    async def renew(self, who: Principal, task_id: str) -> BoardTask:
        self.check_claimant(who)
        return await self.board.renew(task_id, who.name)

    async def release(self, who: Principal, task_id: str) -> BoardTask:
        self.check_claimant(who)
        return await self.board.release(task_id, who.name, force=who.kind == PrincipalKind.operator)

    async def done(self, who: Principal, task_id: str, result: str) -> BoardTask:
        self.check_claimant(who)
        task = await self.board.done(task_id, who.name, result, force=who.kind == PrincipalKind.operator)
        what = f": {result}" if result else ""
        await self.announce(f"{who.name} finished task `{task_id}`{what}.")  # no @: it would wake them
        return task

    # -- announcements and leases -----------------------------------------------------------

    async def bot(self) -> Principal:
        if self._bot is None:
            self._bot, _ = await self.ctx.principals.ensure(self.settings.bot, PrincipalKind.gate)
        return self._bot

    async def announce(self, text: str) -> None:
        try:
            await self.ctx.chat.notify(await self.bot(), self.settings.channel, text)
        except Exception:  # an announcement never fails the action that caused it
            log.exception("task board announcement failed: %s", text)

    async def renew_live(self) -> int:
        """Renew leases about to lapse whose holder still sends heartbeats (renew-on-heartbeat)."""
        now = time.time()
        renewed = 0
        for task_id, holder, renewed_at in await self.board.expiring(self.settings.claim_ttl_s / 2):
            beat = await self.ctx.redis.hget(gateway_keys.heartbeat(holder), "ts")
            if not beat or now - float(beat) > self.settings.heartbeat_fresh_s:
                continue
            if now - renewed_at > self.settings.heartbeat_renew_max_s:
                continue
            with contextlib.suppress(BoardError):  # lost a race with a release or a lapse: fine
                await self.board.renew(task_id, holder, explicit=False)
                renewed += 1
        return renewed

    async def sweep_once(self) -> list[dict[str, Any]]:
        if self.settings.renew_on_heartbeat:
            await self.renew_live()
        await self.board.sweep()
        lapsed = await self.board.pop_expired()
        for item in lapsed:
            who = f"@{item['agent']}" if item.get("agent") else "A"
            await self.announce(
                f"{who}'s claim on task `{item['task']}` lapsed (not renewed within "
                f"{self.settings.claim_ttl_s:g} s); the task is open again."
            )
        return lapsed

    async def sweeper(self) -> None:
        while True:
            try:
                await self.sweep_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # keep sweeping: a Redis hiccup must not end lease expiry
                log.exception("task board sweep failed")
            await asyncio.sleep(self.settings.sweep_s)


def service_of(request: Request) -> BoardService:
    return request.app.state.ctx.extras["tasks"]


Svc = Annotated[BoardService, Depends(service_of)]


@contextlib.contextmanager
def http_errors() -> Any:
    try:
        yield
    except BoardError as exc:
        raise HTTPException(status_code=exc.status, detail=str(exc)) from exc


def build_tasks_router() -> APIRouter:
    r = APIRouter(prefix="/api/tasks", tags=["tasks"])

    @r.get("", response_model=list[BoardTask], summary="The board: every task with its state")
    async def list_tasks(
        svc: Svc, _: Caller, state: Annotated[str | None, Query(description="open, claimed, done")] = None
    ) -> list[BoardTask]:
        return await svc.board.list(state)

    @r.post("", response_model=BoardTask, status_code=201, summary="Post a task (operators, lead agents)")
    async def post(spec: TaskSpec, svc: Svc, who: Caller) -> BoardTask:
        with http_errors():
            return await svc.post(who, spec)

    @r.get("/leads", summary="Agents allowed to post tasks")
    async def leads(svc: Svc, _: Caller) -> list[str]:
        return sorted(set(svc.settings.leads) | await svc.board.leads())

    @r.put("/leads/{name}", status_code=204, summary="Let an agent post tasks (operators)")
    async def add_lead(name: str, svc: Svc, _: Operator) -> Response:
        if await svc.ctx.principals.get(name) is None:
            raise HTTPException(404, f"unknown principal {name!r}")
        await svc.board.add_lead(name)
        return Response(status_code=204)

    @r.delete("/leads/{name}", status_code=204, summary="Stop an agent posting tasks (operators)")
    async def remove_lead(name: str, svc: Svc, _: Operator) -> Response:
        await svc.board.remove_lead(name)
        return Response(status_code=204)

    @r.post("/seed", summary="Seed the dataset repo from the catalogue and post its tasks (operators)")
    async def seed(body: SeedBody, svc: Svc, who: Operator) -> dict[str, Any]:
        with http_errors():
            return await seed_dataset(svc, who, body)

    @r.get("/{task_id}", response_model=BoardTask, summary="One task")
    async def get(task_id: str, svc: Svc, _: Caller) -> BoardTask:
        with http_errors():
            return await svc.board.get(task_id)

    @r.delete("/{task_id}", status_code=204, summary="Remove a task (operators)")
    async def delete(task_id: str, svc: Svc, _: Operator) -> Response:
        with http_errors():
            await svc.board.delete(task_id)
        return Response(status_code=204)

    @r.post("/{task_id}/claim", response_model=BoardTask, summary="Claim (you hold a lease; 409 if taken)")
    async def claim(task_id: str, svc: Svc, who: Caller) -> BoardTask:
        with http_errors():
            return await svc.claim(who, task_id)

    @r.post("/{task_id}/renew", response_model=BoardTask, summary="Renew your claim's lease")
    async def renew(task_id: str, svc: Svc, who: Caller) -> BoardTask:
        with http_errors():
            return await svc.renew(who, task_id)

    @r.post("/{task_id}/release", response_model=BoardTask, summary="Give your claim up (operators: any)")
    async def release(task_id: str, svc: Svc, who: Caller) -> BoardTask:
        with http_errors():
            return await svc.release(who, task_id)

    @r.post("/{task_id}/done", response_model=BoardTask, summary="Mark your claimed task done")
    async def done(task_id: str, body: DoneBody, svc: Svc, who: Caller) -> BoardTask:
        with http_errors():
            return await svc.done(who, task_id, body.result)

    return r


def _brief(task: BoardTask) -> dict[str, Any]:
    return task.model_dump(include={"id", "title", "state", "holder", "expires_at", "labels", "repo"})


def register_task_tools(mcp: Any, svc: BoardService) -> None:
    def fail(exc: BoardError | ValidationError) -> ToolError:
        status = exc.status if isinstance(exc, BoardError) else 422
        return ToolError(f"{exc} (HTTP {status})")

    @mcp.tool(
        name="task_list", description="Tasks on the board (state: open|claimed|done|all), with holders."
    )
    async def task_list(state: str = "open") -> list[dict[str, Any]]:
        caller()
        return [_brief(t) for t in await svc.board.list(state)]

    @mcp.tool(name="task_claim", description="Claim a task: a lease in your name; renew it while you work.")
    async def task_claim(id: str) -> dict[str, Any]:
        try:
            return (await svc.claim(caller(), id)).model_dump()
        except BoardError as exc:
            raise fail(exc) from exc

    @mcp.tool(name="task_renew", description="Renew your claim's lease (heartbeats also renew it).")
    async def task_renew(id: str) -> dict[str, Any]:
        try:
            return _brief(await svc.renew(caller(), id))
        except BoardError as exc:
            raise fail(exc) from exc

    @mcp.tool(name="task_release", description="Give up your claim; the task is open again.")
    async def task_release(id: str) -> dict[str, Any]:
        try:
            return _brief(await svc.release(caller(), id))
        except BoardError as exc:
            raise fail(exc) from exc

    @mcp.tool(name="task_done", description="Mark your claimed task done, with a result (e.g. 'PR #4').")
    async def task_done(id: str, result: str = "") -> dict[str, Any]:
        try:
            return _brief(await svc.done(caller(), id, result[:2000]))
        except BoardError as exc:
            raise fail(exc) from exc

    @mcp.tool(name="task_post", description="Post a task to the board (lead agents and operators).")
    async def task_post(
        id: str, title: str, description: str = "", labels: list[str] | None = None
    ) -> dict[str, Any]:
        try:
            spec = TaskSpec(id=id, title=title, description=description, labels=labels or [])
            return _brief(await svc.post(caller(), spec))
        except (BoardError, ValidationError) as exc:
            raise fail(exc) from exc


def tasks_plugin(
    app: FastAPI, ctx: GatewayContext, mcp: Any, settings: TasksSettings | None = None
) -> Callable[[], AbstractAsyncContextManager[None]]:
    settings = settings or TasksSettings()
    svc = BoardService(ctx, settings)
    ctx.extras["tasks"] = svc
    app.include_router(build_tasks_router())
    register_task_tools(mcp, svc)

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        await svc.bot()
        task = asyncio.create_task(svc.sweeper(), name="kswarm-tasks-sweeper")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return lifespan
