"""Request authentication: every route but /healthz resolves the caller from its token."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable

from fastapi import Request
from starlette.datastructures import Headers

from gateway.errors import Forbidden, Unauthorized
from gateway.principals import Principal, PrincipalKind


def token_from_headers(headers: Headers) -> str | None:
    """The bearer token of a request, from whichever header its client uses.

    ``Authorization: Bearer`` (REST, MCP, the anthropic SDK), ``Authorization: token`` (Gitea
    clients), ``Authorization: Basic`` with the token as password (git's credential helper) and
    ``x-api-key`` (the Claude Code CLI talking to the LLM proxy).
    """
    auth = headers.get("authorization", "")
    scheme, _, value = auth.partition(" ")
    scheme = scheme.lower()
    value = value.strip()
    if scheme in ("bearer", "token") and value:
        return value
    if scheme == "basic" and value:
        try:
            decoded = base64.b64decode(value, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        _, _, password = decoded.partition(":")
        return password or None
    return headers.get("x-api-key") or None


async def current_principal(request: Request) -> Principal:
    """The authenticated principal, or 401 (``gateway.deps.AnyPrincipal`` in a route)."""
    cached = getattr(request.state, "principal", None)
    if cached is not None:
        return cached
    token = token_from_headers(request.headers)
    if token is None:
        raise Unauthorized("missing bearer token")
    principal = await request.app.state.ctx.principals.verify(token)
    if principal is None:
        raise Unauthorized("invalid or revoked token")
    request.state.principal = principal
    return principal


def require_kind(*kinds: PrincipalKind) -> Callable[[Request], Awaitable[Principal]]:
    """A dependency: the principal, or 403 unless it is one of ``kinds`` (the aliases: ``gateway.deps``)."""

    async def dependency(request: Request) -> Principal:
        principal = await current_principal(request)
        if principal.kind not in kinds:
            allowed = ", ".join(k.value for k in kinds)
            raise Forbidden(f"{principal.kind.value} may not do this (needs {allowed})")
        return principal

    return dependency


require_operator = require_kind(PrincipalKind.operator)  # routes: gateway.deps.OperatorOnly
