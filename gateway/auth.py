"""Request authentication: every route but /healthz resolves the caller from its token.

``TokenCheck`` is the lookup every request makes (REST, SSE, MCP, the LLM proxy): the token's hash to
its principal, with ``PrincipalStore.verify``'s rules -- only ``ksw_`` tokens, unknown, revoked and
quarantined ones refused. A granted token is then served from the replica's ``TokenCache`` (no Redis
round trip) for as long as no change to principals or tokens has been announced
(``gateway.auth_changes``); otherwise, and whenever the cache is suspended, one round trip (a script
reads both keys). Refusals are never cached: a token issued a moment ago works at once.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable

from fastapi import Request
from starlette.datastructures import Headers

from gateway import keys
from gateway.errors import Forbidden, Unauthorized
from gateway.principals import TOKEN_PREFIX, Principal, PrincipalKind, hash_token
from gateway.redis_facade import StrRedis
from gateway.token_cache import TokenCache

# KEYS[1]: the token's key. Returns the principal's JSON, or false. The principal's key is derived from
# the name the token maps to, so it cannot be declared (one Redis, no cluster: docs/architecture.md).
_VERIFY_SCRIPT = """
local name = redis.call('GET', KEYS[1])
if not name then return false end
return redis.call('HGET', ARGV[1] .. name, 'json')
"""


class TokenCheck:
    """Token -> principal from the cache or in one round trip; None for unknown, revoked or disabled
    tokens. ``counted`` is told where each check was answered ("cache" or "redis"): the gateway's metrics."""

    def __init__(
        self, redis: StrRedis, cache: TokenCache | None = None, counted: Callable[[str], None] | None = None
    ) -> None:
        self._script = redis.register_script(_VERIFY_SCRIPT)
        # Not ``cache or ...``: an empty cache is falsy. Suspended until a CacheListener grants it a lease.
        self.cache = cache if cache is not None else TokenCache()
        self._counted = counted

    async def verify(self, token: str) -> Principal | None:
        if not token.startswith(TOKEN_PREFIX):
            return None
        token_hash = hash_token(token)
        cached = self.cache.get(token_hash)
        if cached is not None:
            self._count("cache")
            return cached
        generation = self.cache.generation  # before the read: a change announced meanwhile voids it
        raw = await self._script(keys=[keys.token(token_hash)], args=[keys.principal("")])
        self._count("redis")
        if not raw:
            return None
        principal = Principal.model_validate_json(raw)
        if principal.disabled:
            return None
        self.cache.put(token_hash, principal, generation)
        return principal

    def _count(self, source: str) -> None:
        if self._counted is not None:
            self._counted(source)


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
    principal = await request.app.state.ctx.tokens.verify(token)
    if principal is None:
        raise Unauthorized("invalid or revoked token")
    request.state.principal = principal
    return principal


def token_still_valid(tokens: TokenCheck, token: str) -> Callable[[], Awaitable[bool]]:
    """For a long request (a blocked inbox wait, an SSE stream): whether the token it came with is
    still good, asked again when it wakes; a revoked or quarantined token ends it at once."""

    async def valid() -> bool:
        return await tokens.verify(token) is not None

    return valid


def still_valid(request: Request) -> Callable[[], Awaitable[bool]] | None:
    """``token_still_valid`` for the token of a REST request; None for the UI's in-process calls,
    which carry no token (``gateway.ui.internal``: the session was checked when the page asked)."""
    token = token_from_headers(request.headers)
    if token is None:
        return None
    return token_still_valid(request.app.state.ctx.tokens, token)


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
