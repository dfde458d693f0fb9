"""Who may open /ui: operators, with a cookie session (browsers) or a bearer token (scripts).

A browser logs in once with an operator token; the gateway answers with an opaque session id in an
HttpOnly, SameSite=Strict cookie. The session lives in Redis under ``ks:ui-session:<sha256(id)>``
(the id itself is never stored) with the hash of the token it was opened with, so revoking that
token, disabling the operator or the session's expiry ends it. Every state-changing request made
with the cookie must carry the session's CSRF token (``X-CSRF-Token`` header or a ``csrf`` form
field); bearer requests carry no ambient credential and need none.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qs

from fastapi import FastAPI, Request, Response
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from gateway import keys
from gateway.auth import token_from_headers
from gateway.errors import UiAuthError
from gateway.principals import Principal, PrincipalKind, PrincipalStore, hash_token
from gateway.redis_facade import StrRedis

COOKIE = "ks_ui_session"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
MAX_FORM_BYTES = 64 * 1024


class UiSettings(BaseSettings):
    """UI configuration (environment prefix ``KSWARM_UI_``)."""

    model_config = SettingsConfigDict(env_prefix="KSWARM_UI_", extra="ignore")

    session_ttl_s: int = Field(12 * 3600, ge=60, description="Lifetime of a login (absolute, not sliding).")
    cookie_secure: bool = Field(
        False, description="Mark the cookie Secure (set when a TLS proxy fronts the gateway)."
    )
    login_link_ttl_s: int = Field(
        600, ge=30, le=3600, description="How long a one-time login link (`kswarm ui`) stays usable."
    )


def session_key(session_id: str) -> str:
    return f"{keys.PREFIX}ui-session:{hashlib.sha256(session_id.encode()).hexdigest()}"


@dataclass(frozen=True)
class UiUser:
    """The operator behind a /ui request, and how they proved it."""

    principal: Principal
    via: Literal["cookie", "bearer"]
    app: FastAPI  # the app the request came through: the UI reads the gateway by calling its routes
    csrf: str | None = None  # the session's CSRF token (cookie sessions only)


@dataclass(frozen=True)
class Session:
    name: str
    token_hash: str
    csrf: str
    expires: float


def wants_html(request: Request) -> bool:
    return request.method in SAFE_METHODS and "text/html" in request.headers.get("accept", "")


def same_origin(request: Request) -> bool:
    """False only when the browser says the request comes from another site."""
    if request.headers.get("sec-fetch-site") in ("cross-site", "same-site"):
        return False
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    host = request.headers.get("host", "")
    return origin.split("://", 1)[-1] == host


async def form_fields(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body as a dict (first value of each field)."""
    if "application/x-www-form-urlencoded" not in request.headers.get("content-type", ""):
        return {}
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise UiAuthError("form too large", 413)
    return {k: v[0] for k, v in parse_qs(body.decode(errors="replace")).items()}


class SessionStore:
    """UI sessions in Redis; one instance per app."""

    def __init__(self, redis: StrRedis, principals: PrincipalStore, ttl_s: int) -> None:
        self.redis = redis
        self.principals = principals
        self.ttl_s = ttl_s

    async def create(self, principal: Principal, token: str) -> tuple[str, Session]:
        return await self.create_for(principal, hash_token(token))

    async def create_for(self, principal: Principal, token_hash: str) -> tuple[str, Session]:
        """A session bound to the token whose hash is ``token_hash`` (a login link holds only that)."""
        session_id = secrets.token_urlsafe(32)
        session = Session(
            name=principal.name,
            token_hash=token_hash,
            csrf=secrets.token_urlsafe(32),
            expires=time.time() + self.ttl_s,
        )
        key = session_key(session_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping={**session.__dict__, "expires": repr(session.expires)})
            pipe.expire(key, self.ttl_s)
            await pipe.execute()
        return session_id, session

    async def load(self, session_id: str) -> Session | None:
        raw = await self.redis.hgetall(session_key(session_id))
        if not raw or float(raw.get("expires", 0)) < time.time():
            return None
        return Session(raw["name"], raw["token_hash"], raw["csrf"], float(raw["expires"]))

    async def delete(self, session_id: str) -> None:
        await self.redis.delete(session_key(session_id))

    async def principal_of(self, session: Session) -> Principal | None:
        """The session's operator, or None when its token was revoked or the operator disabled."""
        if await self.redis.get(keys.token(session.token_hash)) != session.name:
            return None
        principal = await self.principals.get(session.name)
        if principal is None or principal.disabled or principal.kind != PrincipalKind.operator:
            return None
        return principal


def set_session_cookie(reply: Response, session_id: str, settings: UiSettings, request: Request) -> None:
    """The session cookie, the same for every way of logging in."""
    reply.set_cookie(
        COOKIE,
        session_id,
        max_age=settings.session_ttl_s,
        path="/ui",
        httponly=True,
        samesite="strict",
        secure=settings.cookie_secure or request.url.scheme == "https",
    )


class UiAuth:
    """FastAPI dependencies for /ui: ``user`` (any method) and ``csrf_user`` (state-changing)."""

    def __init__(self, sessions: SessionStore) -> None:
        self.sessions = sessions

    async def user(self, request: Request) -> UiUser:
        token = token_from_headers(request.headers)
        if token is not None:
            principal = await self.sessions.principals.verify(token)
            if principal is None:
                raise UiAuthError("invalid or revoked token", 401)
            return self._operator_only(UiUser(principal, "bearer", request.app))
        session_id = request.cookies.get(COOKIE)
        if not session_id:
            raise UiAuthError(
                "log in with an operator token (or send Authorization: Bearer)", 401, login=True
            )
        session = await self.sessions.load(session_id)
        principal = await self.sessions.principal_of(session) if session else None
        if session is None or principal is None:
            raise UiAuthError("your session has ended; log in again", 401, login=True)
        return UiUser(principal, "cookie", request.app, session.csrf)

    async def csrf_user(self, request: Request) -> UiUser:
        """``user``, and for cookie sessions a matching CSRF token and a same-origin request."""
        user = await self.user(request)
        if user.via == "bearer":
            return user
        sent = request.headers.get(CSRF_HEADER) or (await form_fields(request)).get("csrf", "")
        if not same_origin(request):
            raise UiAuthError("cross-site request refused", 403)
        if not sent or not hmac.compare_digest(sent, user.csrf or ""):
            raise UiAuthError("missing or wrong CSRF token (reload the page)", 403)
        return user

    @staticmethod
    def _operator_only(user: UiUser) -> UiUser:
        if user.principal.kind != PrincipalKind.operator:
            raise UiAuthError(f"{user.principal.kind.value}s may not open the operator UI", 403)
        return user
