"""The KB panel: the knowledge base's notes (merged into its protected branch), a search box, and one note
rendered as sanitized markdown with its history (the branch's commits that changed it, linked).

Everything comes from the kb plugin's REST routes (``/api/kb``, ``/api/kb/search``, ``/api/kb/files/...``,
``/api/kb/history/...``) as the logged-in principal; a note's text, path and commit messages are an agent's
words, so they go through the markdown sanitizer or Jinja's escaping, never raw into the page."""

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from gateway.errors import GatewayError
from gateway.ui.deps import UiDep, UiSvc
from gateway.ui.internal import has_route
from gateway.ui.markdown import sha_href

KB_ROUTE = "/api/kb"
MAX_PATH = 300


router = APIRouter(prefix="/ui")


@router.get("/kb", response_class=HTMLResponse, summary="KB: the notes, and a search over them")
async def kb(
    ui: UiSvc, request: Request, user: UiDep, q: Annotated[str, Query(max_length=500)] = ""
) -> HTMLResponse:
    api = ui.api(user)
    available = has_route(request.app, KB_ROUTE)
    info: dict[str, Any] = {}
    results: list[dict[str, Any]] = []
    error = ""
    if available:
        reply = await api.get(KB_ROUTE)
        if reply.ok:
            info = reply.json()
        else:
            error = f"GET {KB_ROUTE}: {reply.status} {reply.detail}"
        if q.strip() and not error:
            found = await api.get(f"{KB_ROUTE}/search", q=q.strip(), limit=20)
            if found.ok:
                results = found.json().get("results") or []
            else:
                error = f"search: {found.status} {found.detail}"
    return ui.page(
        "kb.html",
        request,
        user,
        "kb",
        available=available,
        info=info,
        q=q,
        results=results,
        error=error,
    )


@router.get("/kb/{path:path}", response_class=HTMLResponse, summary="One KB note and its history")
async def note(ui: UiSvc, request: Request, path: str, user: UiDep) -> HTMLResponse:
    path = path.strip("/")
    if not path or len(path) > MAX_PATH:
        raise GatewayError(f"a note path has 1 to {MAX_PATH} characters", 400)
    if not has_route(request.app, KB_ROUTE):
        raise GatewayError("no knowledge base is registered with this gateway", 404)
    api = ui.api(user)
    reply = await api.get(f"{KB_ROUTE}/files/{path}")
    if not reply.ok:
        raise GatewayError(reply.detail, reply.status)
    found = reply.json()
    history = await api.get(f"{KB_ROUTE}/history/{path}", limit=50)
    commits = history.json().get("commits") or [] if history.ok else []
    repo = str(found.get("repo") or "")
    return ui.page(
        "kb_note.html",
        request,
        user,
        "kb",
        path=path,
        note=found,
        repo=repo,
        commits=[c | {"href": sha_href(str(c["sha"]), repo)} for c in commits],
        history_error="" if history.ok else history.detail,
    )
