"""Principals (agents, operators, workers, the gate bot) and their bearer tokens.

Tokens are 32 random bytes, shown once, and stored only as SHA-256 hashes; the hash is the
lookup key, so verifying a token is one Redis GET. Revoking deletes the hash.

Every write that could end or change a grant (revoking, quarantining, enabling, rewriting a principal)
goes through ``announced_change``: the gateway replicas cache granted tokens (``gateway.token_cache``)
and the change returns only once none of them can still grant from what it cached before.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from enum import StrEnum

from pydantic import BaseModel, Field

from gateway import keys
from gateway.auth_changes import announced_change
from gateway.errors import PrincipalError
from gateway.redis_facade import StrRedis

NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,38}$")
TOKEN_PREFIX = "ksw_"


class PrincipalKind(StrEnum):
    agent = "agent"
    operator = "operator"
    worker = "worker"
    gate = "gate"


class Principal(BaseModel):
    """Who a request comes from; always derived from the bearer token."""

    name: str = Field(description="Unique lower-case name; also the git user.name and chat handle.")
    kind: PrincipalKind = Field(description="agent, operator, worker or gate.")
    email: str = Field(description="Git e-mail; commits must carry exactly this address.")
    created: float = Field(0.0, description="Unix time of creation.")
    disabled: bool = Field(False, description="True while quarantined: tokens refused.")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def email_for(name: str, kind: PrincipalKind, swarm: str) -> str:
    group = {"agent": "agents", "operator": "operators", "worker": "workers", "gate": "bots"}[kind]
    return f"{name}@{group}.{swarm}"


def validate_name(name: str) -> None:
    if name in {"all", "here", "everyone"}:
        raise PrincipalError(f"name {name!r} is reserved")
    if not NAME_RE.match(name):
        raise PrincipalError(
            f"bad name {name!r}: use 1-39 characters a-z, 0-9 and '-', starting with a letter"
        )


class PrincipalStore:
    """Principals and token hashes in Redis."""

    def __init__(self, redis: StrRedis, swarm: str) -> None:
        self.redis = redis
        self.swarm = swarm

    async def create(self, name: str, kind: PrincipalKind, email: str | None = None) -> tuple[Principal, str]:
        """Create a principal and its first token; the token is returned only here."""
        validate_name(name)
        principal = Principal(
            name=name, kind=kind, email=email or email_for(name, kind, self.swarm), created=time.time()
        )
        created = await self.redis.hsetnx(keys.principal(name), "json", principal.model_dump_json())
        if not created:
            raise PrincipalError(f"principal {name!r} already exists", status=409)
        await self.redis.sadd(keys.PRINCIPALS, name)
        return principal, await self.issue_token(name)

    async def ensure(self, name: str, kind: PrincipalKind) -> tuple[Principal, str | None]:
        """Create the principal if missing; the token is None when it already existed."""
        existing = await self.get(name)
        if existing is not None:
            return existing, None
        try:
            return await self.create(name, kind)
        except PrincipalError as exc:  # lost a race with another creator
            if exc.status != 409:
                raise
            existing = await self.get(name)
            assert existing is not None
            return existing, None

    async def issue_token(self, name: str) -> str:
        if await self.get(name) is None:
            raise PrincipalError(f"unknown principal {name!r}", status=404)
        token = new_token()
        token_hash = hash_token(token)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(keys.token(token_hash), name)
            pipe.sadd(keys.principal_tokens(name), token_hash)
            await pipe.execute()
        return token

    async def revoke_tokens(self, name: str) -> int:
        """Revoke every token of ``name``; returns how many were revoked."""
        hashes = await self.redis.smembers(keys.principal_tokens(name))
        if not hashes:
            return 0
        async with announced_change(self.redis) as pipe:
            for token_hash in hashes:
                pipe.delete(keys.token(token_hash))
            pipe.delete(keys.principal_tokens(name))
        await self.end_waits(name)  # after the caches were dropped: a woken wait asks Redis again
        return len(hashes)

    async def end_waits(self, name: str) -> None:
        """Wake ``name``'s blocked inbox waits (in every gateway process): each asks again whether its
        token is still good, so a revoked or quarantined principal stops receiving at once."""
        await self.redis.xadd(
            keys.WAKE, {"to": keys.inbox_topic(name)}, maxlen=keys.WAKE_MAXLEN, approximate=True
        )

    async def revoke_token(self, token: str) -> bool:
        token_hash = hash_token(token)
        name = await self.redis.get(keys.token(token_hash))
        if name is None:
            return False
        async with announced_change(self.redis) as pipe:
            pipe.delete(keys.token(token_hash))
            pipe.srem(keys.principal_tokens(name), token_hash)
        await self.end_waits(name)
        return True

    async def set_disabled(self, name: str, disabled: bool) -> Principal:
        principal = await self.get(name)
        if principal is None:
            raise PrincipalError(f"unknown principal {name!r}", status=404)
        principal.disabled = disabled
        async with announced_change(self.redis) as pipe:
            pipe.hset(keys.principal(name), "json", principal.model_dump_json())
        if disabled:
            await self.end_waits(name)
        return principal

    async def verify(self, token: str) -> Principal | None:
        """The principal a token belongs to, or None for unknown, revoked or disabled tokens."""
        if not token.startswith(TOKEN_PREFIX):
            return None
        name = await self.redis.get(keys.token(hash_token(token)))
        if name is None:
            return None
        principal = await self.get(name)
        if principal is None or principal.disabled:
            return None
        return principal

    async def get(self, name: str) -> Principal | None:
        raw = await self.redis.hget(keys.principal(name), "json")
        return Principal.model_validate_json(raw) if raw else None

    async def exists(self, name: str) -> bool:
        return bool(await self.redis.sismember(keys.PRINCIPALS, name))

    async def list(self, kind: PrincipalKind | None = None) -> list[Principal]:
        names = sorted(await self.redis.smembers(keys.PRINCIPALS))
        if not names:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for n in names:
                pipe.hget(keys.principal(n), "json")
            raw_list = await pipe.execute()
        found = [Principal.model_validate_json(r) for r in raw_list if r]
        return [p for p in found if kind is None or p.kind == kind]
