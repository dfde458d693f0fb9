"""Who calls the Gitea-shaped routes: Gitea's auth rules on kswarm's principals.

A token (``Authorization: token|Bearer``) is a principal; operators are Gitea's admins and may act as
another user with ``Sudo: <user>``; token creation takes the user's Basic credentials, as in Gitea. Once
the caller is known, each of these checks the route's path and query parameters (``gitea_params``).
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated

from fastapi import Depends, Request

from gateway.auth import current_principal
from gateway.deps import ctx_of
from gateway.errors import ForgeError
from gateway.forge.embedded.forge import EmbeddedForge
from gateway.forge.gitea_api.params import check_gitea_params
from gateway.principals import Principal, PrincipalKind
from gateway.services import FORGE


async def acting(request: Request) -> Principal:
    """The caller, or the user named by ``Sudo`` when the caller is an operator (Gitea's admin)."""
    principal = await current_principal(request)
    sudo = request.headers.get("sudo")
    if not sudo:
        check_gitea_params(request)
        return principal
    if principal.kind != PrincipalKind.operator:
        raise ForgeError("only admins may use Sudo", 403)
    target = await ctx_of(request).principals.get(sudo)
    if target is None or target.disabled:
        raise ForgeError(f"user {sudo!r} does not exist", 404)
    check_gitea_params(request)
    return target


async def admin(request: Request) -> Principal:
    """The caller when an operator (Gitea's admin); 403 in Gitea's words otherwise."""
    principal = await current_principal(request)
    if principal.kind != PrincipalKind.operator:
        raise ForgeError("admin (operator) only", 403)
    check_gitea_params(request)
    return principal


# Gitea's own principals: any principal (an operator may act as another with Sudo), and its admins.
Actor = Annotated[Principal, Depends(acting)]
Admin = Annotated[Principal, Depends(admin)]
BASIC_CHALLENGE = {"WWW-Authenticate": "Basic"}


def basic_credentials(request: Request) -> tuple[str, str]:
    """Dependency: (user, password) from Basic auth, or 401 (a token does not do here, as in Gitea)."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic":
        raise ForgeError("token creation needs Basic auth as the user", 401, headers=BASIC_CHALLENGE)
    try:
        user, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ForgeError("bad Basic credentials", 401, headers=BASIC_CHALLENGE) from exc
    check_gitea_params(request)
    return user, password


Basic = Annotated[tuple[str, str], Depends(basic_credentials)]


async def embedded_forge(request: Request) -> EmbeddedForge:
    """The embedded forge (the only one that serves this Gitea-compatible API)."""
    forge = ctx_of(request).services.get(FORGE)
    if not isinstance(forge, EmbeddedForge):
        raise ForgeError("the Gitea API is served by the embedded forge only", 404)
    return forge


Embedded = Annotated[EmbeddedForge, Depends(embedded_forge)]
