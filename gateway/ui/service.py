"""What every /ui route shares: the app, its context, templates, sessions and the orchestrator view."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from prometheus_client import Counter

from gateway.context import GatewayContext
from gateway.ui.auth import SessionStore, UiAuth, UiSettings, UiUser
from gateway.ui.internal import InternalApi
from gateway.ui.render import Renderer
from gateway.ui.swarm import SwarmControl

PANELS = (
    ("overview", "Overview", "/ui/overview"),
    ("attention", "Attention", "/ui/attention"),
    ("chat", "Chat", "/ui/chat"),
    ("agents", "Agents", "/ui/agents"),
    ("tasks", "Tasks", "/ui/tasks"),
    ("jobs", "Jobs", "/ui/jobs"),
    ("prs", "PRs", "/ui/prs"),
    ("dataset", "Dataset", "/ui/dataset"),
    ("kb", "KB", "/ui/kb"),
    ("charts", "Charts", "/ui/charts"),
)
LANDING = "/ui/overview"


class UiMetrics:
    """UI metrics, in the gateway's registry (SSE clients of /ui/events count in kswarm_sse_clients)."""

    def __init__(self, ctx: GatewayContext) -> None:
        registry = ctx.metrics.registry
        self.logins = Counter("kswarm_ui_logins", "UI login attempts", ["outcome"], registry=registry)
        self.actions = Counter(
            "kswarm_ui_actions", "Operator actions taken in the UI", ["action", "outcome"], registry=registry
        )


@dataclass
class UiService:
    ctx: GatewayContext
    settings: UiSettings
    renderer: Renderer
    sessions: SessionStore
    auth: UiAuth
    control: SwarmControl
    metrics: UiMetrics

    @classmethod
    def build(cls, ctx: GatewayContext, settings: UiSettings | None = None) -> UiService:
        settings = settings or UiSettings()
        sessions = SessionStore(ctx.redis, ctx.principals, settings.session_ttl_s)
        return cls(
            ctx=ctx,
            settings=settings,
            renderer=Renderer(),
            sessions=sessions,
            auth=UiAuth(sessions),
            control=SwarmControl(ctx.redis, ctx.principals),
            metrics=UiMetrics(ctx),
        )

    def api(self, user: UiUser) -> InternalApi:
        """The gateway's own routes, called in-process as ``user`` (through the app that served them)."""
        return InternalApi(user.app, user.principal)

    def page(
        self, template: str, request: Request, user: UiUser, panel: str, status: int = 200, **context: Any
    ) -> HTMLResponse:
        """A full page (or, with ``?fragment=1``, only its panel body for a live refresh)."""
        fragment = request.query_params.get("fragment") == "1"
        return self.renderer.page(
            template,
            status,
            user=user,
            csrf=user.csrf or "",
            panel=panel,
            panels=PANELS,
            swarm=self.ctx.settings.swarm,
            fragment=fragment,
            **context,
        )
