"""``ForgePlugin`` (``forge``): the forge, its HTTP routes, MCP tools and the gate bot, in the gateway.

Provides the forge, its settings, the review gate and the evidence ledger (``gateway.services``). With
``KSWARM_FORGE_GITEA_URL`` set the gateway talks to Gitea (no /git or /api/v1 routes are served then)
and, with a webhook secret, receives Gitea's webhooks at ``/api/forge/gitea/hook``; otherwise it is the
embedded forge, which delivers webhooks to the hooks registered on its repositories.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import APIRouter

from gateway.context import GatewayContext
from gateway.errors import ForgeError
from gateway.forge import routes as forge_routes
from gateway.forge.defaults import DefaultRepo
from gateway.forge.embedded import git_http
from gateway.forge.embedded.forge import EmbeddedForge
from gateway.forge.gate.gate import ReviewGate
from gateway.forge.gate.ledger import EvidenceLedger
from gateway.forge.gitea import shapes
from gateway.forge.gitea import webhook as gitea_webhook
from gateway.forge.gitea.forge import GiteaForge
from gateway.forge.gitea_api import content as gitea_content
from gateway.forge.gitea_api import routes as gitea_routes
from gateway.forge.hooks_out import HookDeliverer
from gateway.forge.mcp_tools import pr_tools
from gateway.forge.protocol import Forge
from gateway.forge.settings import ForgeSettings
from gateway.plugin import Contribution, Loop, Plugin
from gateway.principals import PrincipalKind
from gateway.services import EVIDENCE_LEDGER, FORGE, FORGE_SETTINGS, REVIEW_GATE

log = logging.getLogger("kswarm.forge")


def build_forge(ctx: GatewayContext, settings: ForgeSettings) -> Forge:
    if settings.gitea_url:
        token = settings.admin_token()
        if not token:
            raise ValueError("KSWARM_FORGE_GITEA_URL needs KSWARM_FORGE_GITEA_ADMIN_TOKEN(_FILE)")
        secret = settings.webhook_secret()
        if settings.gitea_webhook_url and not secret:
            raise ValueError("KSWARM_FORGE_GITEA_WEBHOOK_URL needs KSWARM_FORGE_GITEA_WEBHOOK_SECRET(_FILE)")
        return GiteaForge(
            settings.gitea_url,
            token,
            gate_email=f"gate@bots.{ctx.settings.swarm}",
            redis=ctx.redis,
            webhook_url=settings.gitea_webhook_url,
            webhook_secret=secret,
        )
    return EmbeddedForge(
        ctx.redis, ctx.settings.home / "forge", ctx.principals, ctx.settings.swarm, ctx.settings.url()
    )


class ForgePlugin(Plugin[ForgeSettings]):
    name = "forge"
    settings_model = ForgeSettings
    provides = (FORGE, FORGE_SETTINGS, REVIEW_GATE, EVIDENCE_LEDGER)

    def contribute(self, ctx: GatewayContext) -> Contribution:
        settings = self.settings
        secret = settings.webhook_secret()  # read once: the hooks made and the hooks checked agree
        if secret is not None and settings.gitea_webhook_secret is None:
            settings = settings.model_copy(update={"gitea_webhook_secret": secret})
        forge = build_forge(ctx, settings)
        ledger = EvidenceLedger(ctx.redis)
        gate = ReviewGate(
            forge,
            ctx.redis,
            ctx.chat,
            ctx.principals,
            ledger,
            sweep_s=settings.gate_sweep_s,
            lock_ttl_s=settings.gate_lock_ttl_s,
            metrics=ctx.metrics,
        )
        routers: list[APIRouter] = []
        loops: dict[str, Loop] = {"kswarm-gate": gate.run} if settings.gate_enabled else {}
        if isinstance(forge, EmbeddedForge):
            routers += [git_http.router, gitea_routes.router, gitea_content.router]
            loops["kswarm-forge-hooks"] = HookDeliverer(ctx.redis, hook_renderer(forge)).run
        elif secret is not None:
            routers.append(gitea_webhook.router)
        routers.append(forge_routes.router)

        @contextlib.asynccontextmanager
        async def lifespan() -> AsyncIterator[None]:
            await ctx.principals.ensure("gate", PrincipalKind.gate)
            if isinstance(forge, EmbeddedForge):
                await forge.startup()
            for full in settings.repos:
                org, _, name = full.partition("/")
                try:
                    await forge.ensure_repo(org, name)
                    await DefaultRepo(ctx.redis).claim(full)  # the first one, unless one is set
                except ForgeError as exc:
                    log.error("cannot ensure repo %s: %s", full, exc)
            try:
                yield
            finally:
                await forge.aclose()

        return Contribution(
            services={FORGE: forge, FORGE_SETTINGS: settings, REVIEW_GATE: gate, EVIDENCE_LEDGER: ledger},
            routers=routers,
            tools=pr_tools(ctx),
            background=loops,
            lifespan=lifespan,
        )


def hook_renderer(
    forge: EmbeddedForge,
) -> Callable[[str, dict[str, str]], Awaitable[tuple[dict[str, Any], dict[str, Any] | None]]]:
    """Gitea's repository and pull request JSON for a forge event (what a hook payload carries)."""

    async def render(repo: str, fields: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any] | None]:
        org, _, name = repo.partition("/")
        repo_json = shapes.repo_json(await forge.repo_info(org, name), forge.base_url)
        pr_json = None
        if fields.get("pr"):
            pr_json = shapes.pr_json(await forge.get_pr(org, name, int(fields["pr"])), forge.base_url)
        return repo_json, pr_json

    return render
