"""``UiPlugin`` (``ui``): the operator's live web UI at /ui (login, panels, SSE, actions, an /api bridge).

It provides its own ``UiService`` (``UI``: what the routes' ``UiDep`` reaches the session check by) and
uses no other directly: the panels read the other components through the gateway's own routes
(``InternalApi``), so a component shows up when its routes exist. Routes:

- ``/ui/login`` (GET form, POST token -> cookie session), ``/ui/logout`` (POST);
- ``/ui/login/link/<code>`` (a one-time login link) and ``POST /api/ui/login-links`` (``login_links.py``);
- ``/ui/overview`` (the landing page), ``/ui/attention``, ``/ui/chat``, ``/ui/agents``, ``/ui/tasks``,
  ``/ui/jobs``, ``/ui/prs``, ``/ui/dataset``, ``/ui/kb``, ``/ui/charts``: server-rendered panels;
- ``/ui/agents/<name>`` (timeline, live), ``/ui/jobs/<id>``, ``/ui/prs/<org>/<repo>/<n>`` (per-push diffs),
  ``/ui/commit/...``, ``/ui/pr/<n>``, ``/ui/kb/<note>``: one thing each;
- ``/ui/events``: ``/api/events`` for the cookie session, each message with its rendered HTML;
- ``/ui/api/...``: the gateway's ``/api`` for the cookie session (CSRF-checked unless GET);
- ``/ui/static/...``: the CSS and JavaScript (no secrets, no auth).
"""

from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.routing import Mount

from gateway.context import ErrorPage, GatewayContext
from gateway.errors import GatewayError, UiAuthError
from gateway.monitor.service import MONITOR
from gateway.plugin import Contribution, Plugin
from gateway.principals import PrincipalKind
from gateway.services import FORGE, UI
from gateway.swarm import routes as swarm_routes
from gateway.ui import (
    agent_routes,
    chat_routes,
    dataset_routes,
    jobs_routes,
    kb_routes,
    login_links,
    monitor_routes,
    panel_routes,
    pr_routes,
    tasks_routes,
)
from gateway.ui.auth import (
    COOKIE,
    UiSettings,
    UiUser,
    form_fields,
    same_origin,
    set_session_cookie,
    wants_html,
)
from gateway.ui.deps import ActingDep, UiDep, UiSvc
from gateway.ui.internal import MAX_BODY
from gateway.ui.render import HERE, SECURITY_HEADERS
from gateway.ui.service import LANDING, UiService

API_PASSTHROUGH = ("GET", "POST", "PUT", "DELETE")


def safe_next(value: str | None) -> str:
    """Only redirect back into the UI (no open redirect)."""
    if value and value.startswith("/ui") and not value.startswith("//") and "\\" not in value:
        return value
    return LANDING


auth_router = APIRouter(prefix="/ui")


def login_page(ui: UiService, status: int = 200, error: str = "", next_url: str = LANDING) -> HTMLResponse:
    return ui.renderer.page(
        "login.html", status, error=error, next=safe_next(next_url), swarm=ui.ctx.settings.swarm
    )


@auth_router.get("", include_in_schema=False)
async def root() -> RedirectResponse:
    return RedirectResponse(LANDING, status_code=303)


@auth_router.get("/login", response_class=HTMLResponse, summary="The login form")
async def login_form(ui: UiSvc, next: str = LANDING) -> HTMLResponse:
    return login_page(ui, next_url=next)


@auth_router.post("/login", response_class=HTMLResponse, summary="Log in with an operator token")
async def login(ui: UiSvc, request: Request) -> Response:
    form = await form_fields(request)
    next_url = form.get("next", LANDING)
    if not same_origin(request):
        ui.metrics.logins.labels(outcome="cross-site").inc()
        return login_page(ui, 403, "cross-site login refused", next_url)
    token = form.get("token", "").strip()
    principal = await ui.ctx.principals.verify(token) if token else None
    if principal is None:
        ui.metrics.logins.labels(outcome="bad-token").inc()
        return login_page(ui, 401, "invalid or revoked token", next_url)
    if principal.kind != PrincipalKind.operator:
        ui.metrics.logins.labels(outcome="not-operator").inc()
        return login_page(ui, 403, f"{principal.kind.value}s may not open the operator UI", next_url)
    session_id, _ = await ui.sessions.create(principal, token)
    ui.metrics.logins.labels(outcome="ok").inc()
    reply = RedirectResponse(safe_next(next_url), status_code=303)
    set_session_cookie(reply, session_id, ui.settings, request)
    return reply


@auth_router.post("/logout", summary="End this browser's session")
async def logout(ui: UiSvc, request: Request, user: ActingDep) -> Response:
    session_id = request.cookies.get(COOKIE)
    if session_id:
        await ui.sessions.delete(session_id)
    reply = RedirectResponse("/ui/login", status_code=303)
    reply.delete_cookie(COOKIE, path="/ui")
    return reply


# ``/ui/api/<path>`` -> ``/api/<path>`` as the session's operator: the page's scripts hold no token.
api_bridge = APIRouter(prefix="/ui/api")


async def forward(
    ui: UiService, request: Request, path: str, user: UiUser, params: dict[str, str] | None = None
) -> Response:
    if path == "events" or path.startswith("events/"):
        return JSONResponse({"detail": "use /ui/events for the event stream", "code": "not_found"}, 404)
    if any(part in ("", ".", "..") for part in path.split("/")):
        return JSONResponse({"detail": f"no route /api/{path}", "code": "not_found"}, 404)
    body = await request.body()
    if len(body) > MAX_BODY:
        return JSONResponse({"detail": "request too large", "code": "too_large"}, 413)
    reply = await ui.api(user).request(
        request.method,
        f"/api/{path}",
        dict(request.query_params) if params is None else params,
        body,
        request.headers.get("content-type", "application/json"),
    )
    return Response(reply.body, status_code=reply.status, media_type=reply.content_type)


@api_bridge.get("/{path:path}", summary="GET /api/<path> as the session's operator (changes nothing)")
async def bridge_get(ui: UiSvc, request: Request, path: str, user: UiDep) -> Response:
    # A GET changes nothing: another page on this host (an <img> on another port is same-site)
    # must not move the operator's inbox cursor, so the inbox is only peeked at through here
    # (POST /ui/api/inbox/ack, CSRF-checked, moves it), and a cookie GET from another site is refused.
    if user.via == "cookie" and not same_origin(request):
        raise UiAuthError("cross-site request refused", 403)
    if path.strip("/") == "inbox":
        return await forward(ui, request, path, user, {**request.query_params, "peek": "true"})
    return await forward(ui, request, path, user)


# Out of the schema: one route with several methods would repeat its operation id, and /api's own
# routes already document every call this bridge forwards.
@api_bridge.api_route("/{path:path}", methods=list(API_PASSTHROUGH[1:]), include_in_schema=False)
async def bridge_change(ui: UiSvc, request: Request, path: str, user: ActingDep) -> Response:
    return await forward(ui, request, path, user)


def ui_error_page(ui: UiService) -> ErrorPage:
    """How a refusal under /ui is answered: a browser gets an HTML page (or, not logged in, the login
    form), a script ``{"detail", "code"}``; both with the UI's security headers."""

    def page(request: Request, exc: GatewayError) -> Response:
        if isinstance(exc, UiAuthError) and exc.login and wants_html(request):
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/ui/login?next={quote(target, safe='/')}", status_code=303)
        if wants_html(request):
            html = ui.renderer.page("error.html", exc.status, code=exc.status, detail=exc.message)
            html.headers.update(exc.headers)
            return html
        return JSONResponse(
            {"detail": exc.message, "code": exc.code},
            status_code=exc.status,
            headers=exc.headers | SECURITY_HEADERS,
        )

    return page


class UiPlugin(Plugin[UiSettings]):
    name = "ui"
    settings_model = UiSettings
    # Read in-process when present: per-push diffs and commits (the forge's protocol), the live timeline.
    optional = (FORGE, MONITOR)
    provides = (UI,)

    def contribute(self, ctx: GatewayContext) -> Contribution:
        ui = UiService.build(ctx, self.settings)

        async def refresh_restarts() -> None:
            """``kswarm_agent_restarts`` from the supervisor's published records (the Agents panel's)."""
            for record in (await ui.control.board.report()).agents:
                ctx.metrics.agent_restarts.labels(agent=record.name).set(record.restarts)

        ctx.metrics.refreshers.append(refresh_restarts)
        ctx.error_pages["/ui/"] = ui_error_page(ui)
        return Contribution(
            services={UI: ui},
            routers=[
                auth_router,
                login_links.api_router,
                login_links.pages_router,
                chat_routes.router,
                monitor_routes.router,
                panel_routes.router,
                agent_routes.router,
                pr_routes.router,
                tasks_routes.router,
                dataset_routes.router,
                kb_routes.router,
                jobs_routes.router,
                api_bridge,
                swarm_routes.router,  # /api/swarm: the seam's REST routes
            ],
            mounts=[Mount("/ui/static", StaticFiles(directory=HERE / "static"), name="ui-static")],
        )
