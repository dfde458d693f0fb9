"""The task board as a service: who may do what, announcements and the lease sweeper.

Shared by the REST routes and the MCP tools of ``gateway.tasks.plugin``; the actor is always the caller's
principal, never a request field.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from gateway import keys as gateway_keys
from gateway.cancellation import nap, rounds
from gateway.context import GatewayContext
from gateway.errors import BoardError
from gateway.principals import Principal, PrincipalKind
from gateway.services import FORGE
from gateway.tasks.board import TaskBoard
from gateway.tasks.models import BoardTask, TaskSpec, TasksSettings
from gateway.tasks.sync import new_tasks_on_main

log = logging.getLogger("kswarm.tasks")

CLAIMANTS = (PrincipalKind.agent, PrincipalKind.operator)


class BoardService:
    """The board plus who may do what, announcements and the background sweeper."""

    def __init__(self, ctx: GatewayContext, settings: TasksSettings) -> None:
        self.ctx = ctx
        self.settings = settings
        self.board = TaskBoard(ctx.redis, settings.claim_ttl_s)
        self._bot: Principal | None = None

    # -- permissions ------------------------------------------------------------------------

    async def is_lead(self, who: Principal) -> bool:
        """A lead agent: named in the spec's ``tasks.leads`` or made one by an operator."""
        return who.kind == PrincipalKind.agent and (
            who.name in self.settings.leads or who.name in await self.board.leads()
        )

    async def check_poster(self, who: Principal) -> None:
        if who.kind == PrincipalKind.operator or await self.is_lead(who):
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
        limit = 0 if who.kind == PrincipalKind.operator else self.settings.max_claims_per_agent
        task, _ = await self.board.claim(task_id, who.name, limit)
        return task

    async def renew(self, who: Principal, task_id: str) -> BoardTask:
        self.check_claimant(who)
        return await self.board.renew(task_id, who.name)

    async def release(self, who: Principal, task_id: str) -> BoardTask:
        self.check_claimant(who)
        return await self.board.release(task_id, who.name, force=who.kind == PrincipalKind.operator)

    async def done(self, who: Principal, task_id: str, result: str) -> BoardTask:
        self.check_claimant(who)
        operator = who.kind == PrincipalKind.operator
        if not operator and self.settings.done_needs_merged_pr:
            await self.check_merged_work(who, await self.board.get(task_id))
        task = await self.board.done(task_id, who.name, result, force=operator)
        what = f": {result}" if result else ""
        await self.announce(f"{who.name} finished task `{task_id}`{what}.")  # no @: it would wake them
        return task

    async def check_merged_work(self, who: Principal, task: BoardTask) -> None:
        """409 unless ``who`` has a merged PR in the task's repo that changes ``kernels/<task>/``: a
        task is done when its kernel is in, not when its claimant says so. (A gateway without a forge
        has no PRs to ask: there the claim is all there is.)"""
        forge = self.ctx.services.find(FORGE)
        if forge is None:
            return
        repo = task.repo or self.settings.dataset_repo
        org, _, name = repo.partition("/")
        folder = f"kernels/{task.id}/"
        merged = [p for p in await forge.list_prs(org, name, "closed") if p.merged and p.author == who.name]
        for pr in sorted(merged, key=lambda p: p.number, reverse=True):
            if any(f.path.startswith(folder) for f in await forge.pr_files(org, name, pr.number)):
                return
        raise BoardError(
            f"task {task.id!r} is not done yet: no merged PR of {who.name}'s in {repo} changes {folder} "
            "(call task_done after the gate merged your PR; an operator may mark it done)",
            409,
        )

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

    async def sync_from_main(self) -> list[str]:
        """Post the tasks that appeared on the dataset repo's protected main (``sync.py``)."""
        forge = self.ctx.services.find(FORGE)
        if forge is None or not self.settings.sync_from_main:
            return []
        specs = await new_tasks_on_main(self.ctx.redis, forge, self.settings.dataset_repo)
        bot = await self.bot()
        posted = []
        for spec in specs:
            try:
                await self.board.post(spec, bot.name)
                posted.append(spec.id)
            except BoardError as exc:
                if exc.status != 409:  # already on the board (posted by hand): fine
                    raise
        if posted:
            await self.announce(
                f"New on {self.settings.dataset_repo}'s main, now on the board: "
                + ", ".join(f"`{t}`" for t in posted)
                + " (task_claim to take one)."
            )
        return posted

    async def sweeper(self) -> None:
        for _ in rounds():
            try:
                await self.sweep_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # keep sweeping: a Redis hiccup must not end lease expiry
                log.exception("task board sweep failed")
            try:
                await self.sync_from_main()
            except asyncio.CancelledError:
                raise
            except Exception:  # the forge may be away (Gitea restarting): the next sweep retries
                log.exception("task board sync from main failed")
            await nap(self.settings.sweep_s)
