"""One-time login links: ``kswarm ui`` (or ``kswarm up``'s banner) hands the operator a URL that logs a
browser in once, so nobody pastes a token into a form and no token ever sits in a URL.

``POST /api/ui/login-links`` (an operator's bearer token only: a cookie session cannot mint links, so
a page on another site cannot either) stores ``sha256(code)`` in Redis with the operator's name and the
hash of the token it was made with, for ``login_link_ttl_s`` (10 min by default). ``GET
/ui/login/link/<code>`` takes the record and deletes it in one transaction (single use), checks the
token is still live and its operator still enabled, and opens an ordinary cookie session bound to that
token (revoking it ends the session, as for ``POST /ui/login``). Any code that is unknown, used or
expired gets the login form with a 401.
"""

import hashlib
import json
import secrets

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel

from gateway import keys
from gateway.auth import token_from_headers
from gateway.errors import UiAuthError
from gateway.principals import hash_token
from gateway.redis_facade import StrRedis
from gateway.ui.auth import Session, set_session_cookie
from gateway.ui.deps import UiDep, UiSvc
from gateway.ui.service import LANDING, UiService

LINK_PATH = "/ui/login/link/"
MAX_CODE_CHARS = 128  # a code is 43 characters; anything far longer is not one


class LoginLink(BaseModel):
    url: str
    path: str
    expires_s: int


def link_key(code: str) -> str:
    return f"{keys.PREFIX}ui-login-link:{hashlib.sha256(code.encode()).hexdigest()}"


class LoginLinks:
    """The codes in Redis: only their hashes are stored, each one taken at most once."""

    def __init__(self, redis: StrRedis, ttl_s: int) -> None:
        self.redis = redis
        self.ttl_s = ttl_s

    async def create(self, name: str, token_hash: str) -> str:
        code = secrets.token_urlsafe(32)
        record = json.dumps({"name": name, "token_hash": token_hash})
        await self.redis.set(link_key(code), record, ex=self.ttl_s)
        return code

    async def take(self, code: str) -> tuple[str, str] | None:
        """(operator name, token hash) of a live code, which is gone afterwards; None otherwise."""
        if not code or len(code) > MAX_CODE_CHARS:
            return None
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(link_key(code))
            pipe.delete(link_key(code))
            raw, _ = await pipe.execute()
        if not raw:
            return None
        record = json.loads(raw)
        return str(record["name"]), str(record["token_hash"])


def links_of(ui: UiService) -> LoginLinks:
    return LoginLinks(ui.ctx.redis, ui.settings.login_link_ttl_s)


api_router = APIRouter(prefix="/api/ui")
pages_router = APIRouter(prefix="/ui")


@api_router.post("/login-links", summary="A one-time login link for the calling operator (bearer only)")
async def create_link(ui: UiSvc, user: UiDep, request: Request) -> LoginLink:
    if user.via != "bearer":
        raise UiAuthError("login links are made with an operator token (kswarm ui), not a session", 403)
    token = token_from_headers(request.headers) or ""  # ``user`` came from this very token
    links = links_of(ui)
    code = await links.create(user.principal.name, hash_token(token))
    path = f"{LINK_PATH}{code}"
    ui.metrics.logins.labels(outcome="link-made").inc()
    return LoginLink(url=ui.ctx.settings.url().rstrip("/") + path, path=path, expires_s=links.ttl_s)


@pages_router.get("/login/link/{code}", response_class=HTMLResponse, summary="Log in with a one-time link")
async def use_link(ui: UiSvc, code: str, request: Request) -> Response:
    taken = await links_of(ui).take(code)
    session = Session(taken[0], taken[1], "", 0.0) if taken else None
    principal = await ui.sessions.principal_of(session) if session else None
    if taken is None or principal is None:
        ui.metrics.logins.labels(outcome="bad-link").inc()
        return ui.renderer.page(
            "login.html",
            401,
            error="this login link is used, expired or unknown; run `kswarm ui` for a new one",
            next=LANDING,
            swarm=ui.ctx.settings.swarm,
        )
    session_id, _ = await ui.sessions.create_for(principal, taken[1])
    ui.metrics.logins.labels(outcome="ok").inc()
    reply = RedirectResponse(LANDING, status_code=303)
    set_session_cookie(reply, session_id, ui.settings, request)
    reply.headers["Cache-Control"] = "no-store"
    reply.headers["Referrer-Policy"] = "no-referrer"
    return reply
