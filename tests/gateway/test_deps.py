"""Who may call what, attacked route by route: every route of a full gateway (every plugin's), found by
walking the app, is called by the principals its dependency alias keeps out — and by nobody at all.

A route that loses its guard, or a new route without one, fails here without anyone listing it."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, get_args

import pytest
import redis as redis_sync
from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, iter_route_contexts

from gateway.auth import current_principal
from gateway.deps import AnyPrincipal, OperatorOnly, WorkerOnly
from kstest.gateway import GatewayThread

# Routes that answer without a token, by design: liveness, the schema, the UI's login form and redirect,
# and how to authenticate to /mcp (RFC 9728 metadata, and OAuth client registration refused with why:
# what clients without a valid token read).
PUBLIC = {
    ("GET", "/.well-known/oauth-protected-resource"),
    ("GET", "/.well-known/oauth-protected-resource/mcp"),
    ("POST", "/register"),
    ("GET", "/healthz"),
    ("GET", "/openapi.json"),
    ("GET", "/docs"),
    ("GET", "/docs/oauth2-redirect"),
    ("GET", "/redoc"),
    ("GET", "/ui"),
    ("GET", "/ui/login"),
    ("POST", "/ui/login"),
}


def guard(alias: Any) -> Callable[..., Any]:
    return get_args(alias)[1].dependency


def calls(dependant: Dependant) -> Iterator[Any]:
    for sub in dependant.dependencies:
        yield sub.call
        yield from calls(sub)


def concrete(path: str) -> str:
    """The path with every parameter filled (a well-formed value where the route has a pattern)."""
    return re.sub(r"\{([^}:]+)(:path)?\}", lambda m: "1-0" if m.group(1) == "root_id" else "x1", path)


def api_routes(app: FastAPI | None) -> list[tuple[str, str, Dependant]]:
    """(method, path, dependant) of every API route, the included routers' flattened."""
    assert app is not None
    found = []
    for context in iter_route_contexts(app.routes):
        route = context.original_route
        if isinstance(route, APIRoute) and context.path:
            found += [(method, context.path, route.dependant) for method in sorted(route.methods)]
    return found


def routes(gw: GatewayThread, alias: Any) -> list[tuple[str, str]]:
    wanted = guard(alias)
    return [(method, path) for method, path, dep in api_routes(gw.app) if wanted in set(calls(dep))]


@pytest.fixture(scope="module")
def gw(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayThread]:
    client = redis_sync.Redis.from_url(redis_url)
    client.flushall()  # one gateway for the module, on an empty Redis
    client.close()
    home: Path = tmp_path_factory.mktemp("deps") / "home"
    gateway = GatewayThread(home, redis_url, swarm="deps")
    gateway.start()
    try:
        yield gateway
    finally:
        gateway.stop()


@pytest.fixture(scope="module")
def tokens(gw: GatewayThread) -> dict[str, str]:
    return {kind: gw.add_principal(f"deps-{kind}", kind) for kind in ("agent", "worker", "gate")}


def refusals(gw: GatewayThread, token: str, targets: list[tuple[str, str]], status: int) -> list[str]:
    wrong = []
    with gw.client(token) as client:
        for method, path in targets:
            reply = client.request(method, concrete(path))
            if reply.status_code != status:
                wrong.append(f"{method} {path}: {reply.status_code} {reply.text[:120]}")
    return wrong


def test_operator_only_routes_refuse_every_other_principal(gw: GatewayThread, tokens: dict[str, str]) -> None:
    targets = routes(gw, OperatorOnly)
    assert ("GET", "/api/principals") in targets and ("POST", "/api/kb/seed") in targets
    assert ("GET", "/api/jobs/pools/{pool}/dead") in targets and ("GET", "/metrics") in targets
    for kind in ("agent", "worker", "gate"):
        assert refusals(gw, tokens[kind], targets, 403) == [], kind


def test_worker_only_routes_refuse_agents_and_operators(gw: GatewayThread, tokens: dict[str, str]) -> None:
    targets = routes(gw, WorkerOnly)
    assert sorted(targets) == [
        ("POST", "/api/jobs/pools/{pool}/take"),
        ("POST", "/api/jobs/{job_id}/finish"),
        ("POST", "/api/jobs/{job_id}/heartbeat"),
    ]
    for token in (tokens["agent"], tokens["gate"], gw.operator_token):
        assert refusals(gw, token, targets, 403) == []


def test_no_route_answers_without_a_token(gw: GatewayThread) -> None:
    targets = [(method, path) for method, path, _ in api_routes(gw.app) if (method, path) not in PUBLIC]
    assert len(targets) > 80, "the walk found the plugins' routes"
    with gw.client(None) as anon:
        wrong = []
        for method, path in targets:
            for headers in ({}, {"Authorization": "Bearer ksw_forged"}):
                reply = anon.request(method, concrete(path), headers=headers)
                if reply.status_code != 401:
                    wrong.append(f"{method} {path} {headers}: {reply.status_code} {reply.text[:120]}")
    assert wrong == []


def test_every_guarded_route_uses_one_of_the_aliases(gw: GatewayThread) -> None:
    """The aliases are the only principal dependencies: no route builds its own from the token."""
    aliases = {guard(AnyPrincipal), guard(OperatorOnly), guard(WorkerOnly)}
    assert guard(AnyPrincipal) is current_principal
    local = []
    for method, path, dependant in api_routes(gw.app):
        if path.startswith(("/ui", "/api/ui/", "/api/v1/", "/git/")) or (method, path) in PUBLIC:
            # the UI's cookie sessions (and its login links: an operator's bearer, never a session)
            # and Gitea's Sudo/admin rules are their own
            continue
        if not set(calls(dependant)) & aliases:
            local.append(path)
    # The LLM proxy authenticates inside (its refusals are Anthropic-shaped and settle reservations).
    assert local == ["/v1/messages", "/v1/messages/count_tokens"]
