"""The Overview (the landing page), the Attention panel and the Charts panel: all read the monitor's
REST routes. The Overview is ``GET /api/monitor/overview`` rendered (the same figures, one computation),
the Attention items on top, and the charts that say what the swarm is doing now.

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

from gateway.ui.auth import UiUser
from gateway.ui.deps import UiDep, UiSvc
from gateway.ui.internal import has_route
from gateway.ui.service import UiService

ATTENTION_ROUTE = "/api/attention"
OVERVIEW_ROUTE = "/api/monitor/overview"
WINDOWS = {"1h": 3600, "6h": 6 * 3600, "24h": 86400, "7d": 7 * 86400}
CHART_ORDER = ("tokens", "cost", "messages", "queue", "jobs", "throughput", "pass-rate", "gate")
OVERVIEW_CHARTS = ("queue", "throughput", "cost")


def severity_counts(report: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in report["items"]:
        counts[item["severity"]] = counts.get(item["severity"], 0) + 1
    return counts


async def chart_svgs(
    ui: UiService, user: UiUser, charts: tuple[str, ...], window_s: float
) -> tuple[list[tuple[str, Markup]], list[str]]:
    """The monitor's SVGs of ``charts`` over the last ``window_s`` (the monitor cuts it at the swarm's
    start), and an error line for each that failed."""
    until = time.time()
    api = ui.api(user)
    svgs: list[tuple[str, Markup]] = []
    errors: list[str] = []
    for chart in charts:
        reply = await api.get(f"/api/monitor/svg/{chart}", since=until - window_s, until=until)
        if reply.ok:
            # Our own SVG: every label in it is escaped where it is made (gateway.monitor.charts).
            svgs.append((chart, Markup(reply.body.decode())))
        else:
            errors.append(f"{chart}: {reply.status} {reply.detail}")
    return svgs, errors


router = APIRouter(prefix="/ui")


@router.get("/overview", response_class=HTMLResponse, summary="Overview: what the swarm is doing")
async def overview(ui: UiSvc, request: Request, user: UiDep) -> HTMLResponse:
    available = has_route(request.app, OVERVIEW_ROUTE)
    data: dict[str, Any] | None = None
    svgs: list[tuple[str, Markup]] = []
    errors: list[str] = []
    if available:
        reply = await ui.api(user).get(OVERVIEW_ROUTE)
        if reply.ok:
            data = reply.json()
        else:
            errors.append(f"GET {OVERVIEW_ROUTE}: {reply.status} {reply.detail}")
        svgs, failed = await chart_svgs(ui, user, OVERVIEW_CHARTS, WINDOWS["6h"])
        errors += failed
    report = data["attention"] if data else {"items": [], "sources": {}}
    return ui.page(
        "overview.html",
        request,
        user,
        "overview",
        available=available,
        data=data,
        report=report,
        counts=severity_counts(report),
        svgs=svgs,
        errors=errors,
    )


@router.get("/attention", response_class=HTMLResponse, summary="Attention: what needs a human now")
async def attention(ui: UiSvc, request: Request, user: UiDep) -> HTMLResponse:
    available = has_route(request.app, ATTENTION_ROUTE)
    report: dict[str, Any] = {"items": [], "sources": {}}
    error = ""
    if available:
        reply = await ui.api(user).get(ATTENTION_ROUTE)
        if reply.ok:
            report = reply.json()
        else:
            error = reply.detail
    return ui.page(
        "attention.html",
        request,
        user,
        "attention",
        available=available,
        report=report,
        counts=severity_counts(report),
        error=error,
    )


@router.get("/charts", response_class=HTMLResponse, summary="Charts: history over time")
async def charts(
    ui: UiSvc,
    request: Request,
    user: UiDep,
    window: Annotated[str, Query(pattern="^(1h|6h|24h|7d)$")] = "6h",
) -> HTMLResponse:
    available = has_route(request.app, "/api/monitor/svg/{chart}")
    svgs: list[tuple[str, Markup]] = []
    errors: list[str] = []
    if available:
        svgs, errors = await chart_svgs(ui, user, CHART_ORDER, WINDOWS[window])
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
