"""Every path and query parameter of the Gitea-compatible routes (``/api/v1``), checked before a route
runs: by each of their auth dependencies (``gitea_auth``: ``Actor``, ``Admin``, ``Basic``) once the
caller is known, so a request without a token is a 401 whatever it names, and a route added later is
checked too (every route of ``/api/v1`` has one of them: ``tests/gateway/test_deps.py``).

Each parameter name has its check from ``gateway.forge.names`` (``PATH_CHECKS``, ``QUERY_CHECKS``); bad
input is a 400 naming the parameter, in Gitea's error shape, before it reaches git or Redis (a NUL in a
path once made ``git ls-tree`` fail with a 500). A path parameter without a check is a programming
error, refused as one (``tests/gateway/forge/test_forge_gitea_params.py`` keeps the table complete).
Integers (``index``, ``hook_id``) are FastAPI's to parse.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Request

from gateway.errors import ForgeError
from gateway.forge.names import check_name, check_path, check_ref, check_user


def _name(value: str, param: str) -> None:
    check_name(value, param, status=400)


def _ref(value: str, param: str) -> None:
    check_ref(value, param)


def _basehead(value: str, param: str) -> None:
    base, sep, head = value.partition("...")
    if not sep:
        raise ForgeError(f"{param}: compare needs base...head", 400)
    check_ref(base, f"{param} (base)")
    check_ref(head, f"{param} (head)")


def _filepath(value: str, param: str) -> None:
    check_path(value.strip("/"), param, status=400, allow_root=True)


def _user(value: str, param: str) -> None:
    check_user(value, param)


def _int(value: str, param: str) -> None:
    """Parsed (and refused) by FastAPI as the route's ``int``."""


PATH_CHECKS: dict[str, Callable[[str, str], None]] = {
    "owner": _name,
    "org": _name,
    "repo": _name,
    "username": _user,
    "user": _user,
    "branch": _ref,  # read only: a branch that cannot exist is refused like any ref
    "name": _ref,  # a branch protection's branch
    "sha": _ref,
    "ref": _ref,
    "basehead": _basehead,
    "filepath": _filepath,
    "index": _int,
    "hook_id": _int,
}
QUERY_CHECKS: dict[str, Callable[[str, str], None]] = {"ref": _ref}


def check_gitea_params(request: Request) -> None:
    """Every path parameter, and the query parameters named in QUERY_CHECKS (400 naming the first bad)."""
    for param, value in request.path_params.items():
        check = PATH_CHECKS.get(param)
        if check is None:  # a route with a parameter nobody checks: refused, not served unchecked
            raise ForgeError(f"{param}: this parameter has no check (gateway/forge/gitea_api/params.py)", 500)
        check(str(value), param)
    for param, check in QUERY_CHECKS.items():
        for value in request.query_params.getlist(param):
            if value:  # empty: the default (a route's ``ref=`` means none)
                check(value, param)
