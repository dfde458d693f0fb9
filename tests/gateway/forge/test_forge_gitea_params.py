"""Attacks on the Gitea-compatible API's parameters, as an agent would send them with its own token.

``GET /api/v1/repos/{owner}/{repo}/contents/%00`` answered 500 for any token (a NUL reached git's argv);
so did a NUL branch or blob sha, ``contents/..%2F..%2Fetc``, and NULs in change-files' branch, path and
from_path or a PR's head and base. Every path and query parameter now goes through the forge's one set
of checks (``gateway/forge/names.py``, applied by ``gitea_api/params.py`` in the routes' auth dependencies):
bad input is a 400 naming the parameter (a body field: Gitea's 422), in Gitea's ``{"message", "url"}``
shape; nothing a client sends is a 5xx.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, iter_route_contexts
from forgekit import ForgeGateway

from gateway.forge.gitea_api.auth import acting, admin, basic_credentials
from gateway.forge.gitea_api.params import PATH_CHECKS

# What a misbehaving client puts in a path segment (already percent-encoded for the URL; a bare ".."
# is resolved away by the client itself). A value that spans segments ("%2F") or holds a newline matches
# no single-segment route: FastAPI's 404 "Not Found" answers it, which is a refusal too.
BAD_SEGMENTS = [
    "%00",
    "a%00b",
    "..%2F..%2Fetc",
    "a%0Ab",
    "-",
    "--output=%2Ftmp%2Fx",
    "x" * 5000,
    "HEAD~1",
    "main%5E",
    "main:README.md",
    "%40%7B0%7D",
    "%E2%80%AE",
    "a%5Cb",
]
ROUTES = [
    "/repos/{repo}/contents/{x}",
    "/repos/{repo}/contents/README.md?ref={x}",
    "/repos/{repo}/contents?ref={x}",
    "/repos/{repo}/branches/{x}",
    "/repos/{repo}/git/commits/{x}",
    "/repos/{repo}/git/trees/{x}",
    "/repos/{repo}/git/blobs/{x}",
    "/repos/{repo}/statuses/{x}",
    "/repos/{repo}/commits/{x}/statuses",
    "/repos/{repo}/commits/{x}/status",
    "/repos/{repo}/compare/main...{x}",
    "/repos/{repo}/compare/{x}...main",
    "/repos/{repo}/branch_protections/{x}",
    "/repos/api/{x}",
    "/repos/{x}/{x}/pulls",
    "/orgs/{x}",
    "/users/{x}",
]


def new_repo(gw: ForgeGateway) -> str:
    name = f"params-{uuid.uuid4().hex[:8]}"
    with gw.op() as op:
        made = op.post("/api/forge/repos", json={"org": "api", "name": name, "default": False})
        assert made.status_code == 201, made.text
    return f"api/{name}"


def refused(reply: httpx.Response, statuses: tuple[int, ...] = (400, 404)) -> str | None:
    """None when ``reply`` is a refusal of one of ``statuses`` with a message: Gitea's shape from a
    route, or FastAPI's ``{"detail", "code"}`` where no route matched."""
    try:
        body = reply.json()
    except ValueError:
        body = None
    if reply.status_code in statuses and isinstance(body, dict):
        if set(body) == {"message", "url"} and body["message"]:
            return None
        if reply.status_code == 404 and body == {"detail": "Not Found", "code": "not_found"}:
            return None
    return f"{reply.status_code} {reply.text[:160]}"


def test_attack_bad_path_and_query_parameters_are_refused_not_500(quiet_gw: ForgeGateway) -> None:
    repo = new_repo(quiet_gw)
    wrong = []
    with quiet_gw.gitea(quiet_gw.tokens["alice"]) as alice:
        for route in ROUTES:
            for bad in BAD_SEGMENTS:
                url = route.format(repo=repo, x=bad)
                if why := refused(alice.get(url)):
                    wrong.append(f"GET {url[:90]}: {why}")
        # The reported one, exactly: a 400 that names the parameter.
        nul = alice.get(f"/repos/{repo}/contents/%00")
        assert nul.status_code == 400 and nul.json()["message"].startswith("filepath: "), nul.text
        dots = alice.get(f"/repos/{repo}/contents/..%2F..%2Fetc%2Fpasswd")
        assert dots.status_code == 400 and "inside the repository" in dots.json()["message"]
        assert alice.get(f"/repos/{repo}/git/blobs/%00").json()["message"].startswith("sha: ")
        assert alice.get(f"/repos/{repo}/contents", params={"ref": "--upload-pack=x"}).status_code == 400
        # Well-formed names still answer as before.
        assert alice.get(f"/repos/{repo}/contents/README.md", params={"ref": "main"}).status_code == 200
        assert alice.get(f"/repos/{repo}/contents/").status_code == 200
        assert alice.get(f"/repos/{repo}/branches/main").status_code == 200
        assert alice.get(f"/repos/{repo}/contents/no/such.md").status_code == 404
    assert wrong == [], "\n".join(wrong)


@pytest.mark.parametrize("who", ["alice", "operator"])
def test_attack_bad_names_in_bodies_are_refused_not_500(quiet_gw: ForgeGateway, who: str) -> None:
    repo = new_repo(quiet_gw)
    token = quiet_gw.operator_token if who == "operator" else quiet_gw.tokens["alice"]
    create = {"operation": "create", "path": "alice/a.md", "content": "eA=="}
    bodies = [
        ("/contents", {"branch": "a\x00b", "files": [create]}),
        ("/contents", {"branch": "main", "new_branch": "alice/\x00", "files": [create]}),
        ("/contents", {"branch": "main", "new_branch": "alice/x\n", "files": [create]}),
        ("/contents", {"branch": "main", "new_branch": "alice/p", "files": [create | {"path": "a\x00b"}]}),
        ("/contents", {"branch": "main", "new_branch": "alice/q", "files": [create | {"path": "../x"}]}),
        (
            "/contents",
            {
                "branch": "main",
                "new_branch": "alice/r",
                "files": [create | {"operation": "update", "from_path": "\x00", "sha": "0" * 40}],
            },
        ),
        ("/pulls", {"head": "alice/\x00", "base": "main", "title": "t"}),
        ("/pulls", {"head": "alice/x", "base": "a\x00b", "title": "t"}),
    ]
    wrong = []
    with quiet_gw.gitea(token) as client:
        for path, body in bodies:
            # 400: a control character, refused at the door (gateway.input_text); 422: the body's check
            if why := refused(client.post(f"/repos/{repo}{path}", json=body), (400, 422)):
                wrong.append(f"POST {path} {str(body)[:100]}: {why}")
    assert wrong == [], "\n".join(wrong)


def test_every_gitea_route_checks_its_parameters(quiet_gw: ForgeGateway) -> None:
    """The checks run in the routes' auth dependencies (a request without a token stays a 401): every
    route under /api/v1 has one of them, and every path parameter has a check in the table (one without
    would be refused as a 500)."""
    assert quiet_gw.app is not None
    checked = {acting, admin, basic_credentials}
    routes = [
        (c.path, c.original_route)
        for c in iter_route_contexts(quiet_gw.app.routes)
        if c.path.startswith("/api/v1/") and isinstance(c.original_route, APIRoute)
    ]
    unchecked = [path for path, route in routes if not set(calls(route.dependant)) & checked]
    assert routes and unchecked == []
    params = {name for path, _ in routes for name in re.findall(r"\{([^}:]+)", path)}
    assert {"owner", "repo", "filepath", "sha"} <= params
    assert params <= set(PATH_CHECKS), params - set(PATH_CHECKS)


def calls(dependant: Dependant) -> Iterator[Any]:
    for sub in dependant.dependencies:
        yield sub.call
        yield from calls(sub)
