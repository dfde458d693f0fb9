"""The Attention panel (the landing page) and the Charts panel: both read the monitor's REST routes.

Attention refreshes itself on every ``type: attention`` event (the monitor announces a change within
``attention_every_s``) and every few seconds as a fallback. Charts are the monitor's server-rendered
SVGs, inlined into the page (no script, no image request); their numbers are also JSON at
``/api/monitor/charts/<chart>`` for scripts.
"""

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from gateway.ui.deps import UiDep
from gateway.ui.internal import has_route
from gateway.ui.service import UiService

ATTENTION_ROUTE = "/api/attention"
WINDOWS = {"1h": 3600, "6h": 6 * 3600, "24h": 86400, "7d": 7 * 86400}
CHART_ORDER = ("tokens", "cost", "messages", "queue", "jobs", "pass-rate", "gate")


def build_monitor_pages(ui: UiService) -> APIRouter:
    router = APIRouter(prefix="/ui")

    @router.get("/attention", response_class=HTMLResponse, summary="Attention: what needs a human now")
    async def attention(request: Request, user: UiDep) -> HTMLResponse:
        available = has_route(ui.app, ATTENTION_ROUTE)
        report: dict[str, Any] = {"items": [], "sources": {}}
        error = ""
        if available:
            reply = await ui.api(user).get(ATTENTION_ROUTE)
            if reply.ok:
                report = reply.json()
            else:
                error = reply.detail
        counts: dict[str, int] = {}
        for item in report["items"]:
            counts[item["severity"]] = counts.get(item["severity"], 0) + 1
        return ui.page(
            "attention.html",
            request,
            user,
            "attention",
            available=available,
            report=report,
            counts=counts,
            error=error,
        )

    @router.get("/charts", response_class=HTMLResponse, summary="Charts: history over time")
    async def charts(
        request: Request,
        user: UiDep,
        window: Annotated[str, Query(pattern="^(1h|6h|24h|7d)$")] = "6h",
    ) -> HTMLResponse:
        available = has_route(ui.app, "/api/monitor/svg/{chart}")
        svgs: list[tuple[str, Markup]] = []
        errors: list[str] = []
        if available:
            until = time.time()
            since = until - WINDOWS[window]
            api = ui.api(user)
            for chart in CHART_ORDER:
                reply = await api.get(f"/api/monitor/svg/{chart}", since=since, until=until)
                if reply.ok:
                    # Our own SVG: every label in it is escaped where it is made (gateway.monitor.charts).
                    svgs.append((chart, Markup(reply.body.decode())))
                else:
                    errors.append(f"{chart}: {reply.status} {reply.detail}")
        return ui.page(
            "charts.html",
            request,
            user,
            "charts",
            available=available,
            svgs=svgs,
            errors=errors,
            window=window,
            windows=list(WINDOWS),
        )

    return router
