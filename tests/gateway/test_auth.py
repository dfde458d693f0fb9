"""Authentication boundaries: every route but /healthz needs a valid, unrevoked token."""

from __future__ import annotations

import re

import httpx
import pytest
import redis as redis_sync

from kstest.gateway import GatewayClients as GatewayProcess

# The UI login form is how a browser gets a session; it answers 401 to a bad token itself. The MCP
# protected-resource metadata (RFC 9728) is what a client reads when it has no valid token.
OPEN_PATHS = {
    "/healthz",
    "/ui/login",
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-protected-resource/mcp",
    "/register",
}


def concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x", path)


def all_routes(gw: GatewayProcess) -> list[tuple[str, str]]:
    spec = httpx.get(f"{gw.url}/openapi.json").json()
    routes = [
        (m.upper(), concrete(p)) for p, ops in spec["paths"].items() for m in ops if p not in OPEN_PATHS
    ]
    return [*routes, ("POST", "/mcp"), ("GET", "/metrics")]


def test_healthz_is_open(gateway: GatewayProcess) -> None:
    assert httpx.get(f"{gateway.url}/healthz").json()["ok"] is True


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer ksw_not-a-real-token-0000000000000000000000000"},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic !!!"},
        {"Authorization": "Bearer operator"},
    ],
    ids=["none", "bad", "empty", "garbage-basic", "a-name-not-a-token"],
)
def test_every_route_refuses_missing_or_bad_tokens(gateway: GatewayProcess, headers: dict[str, str]) -> None:
    for method, path in all_routes(gateway):
        reply = httpx.request(method, gateway.url + path, headers=headers, json={})
        assert reply.status_code == 401, (method, path, reply.status_code, reply.text)


def test_revoked_token_is_refused_everywhere(gateway: GatewayProcess) -> None:
    token = gateway.add_principal("alice")
    with gateway.client(token) as alice:
        assert alice.get("/api/me").json()["name"] == "alice"
    with gateway.client(gateway.operator_token) as op:
        assert op.delete("/api/principals/alice/tokens").json() == {"revoked": 1}
    for method, path in all_routes(gateway):
        reply = httpx.request(
            method, gateway.url + path, headers={"Authorization": f"Bearer {token}"}, json={}
        )
        assert reply.status_code == 401, (method, path)
    # A new token works again: revocation is per token, the identity stays.
    with gateway.client(gateway.operator_token) as op:
        fresh = op.post("/api/principals/alice/tokens").json()["token"]
    with gateway.client(fresh) as alice:
        assert alice.get("/api/me").json()["name"] == "alice"


def test_me_reports_the_tokens_principal(gateway: GatewayProcess) -> None:
    token = gateway.add_principal("alice")
    with gateway.client(token) as alice:
        assert alice.get("/api/me").json() == {"name": "alice", "kind": "agent", "email": "alice@agents.test"}
    # Other header forms carry the same token to the same principal.
    assert httpx.get(f"{gateway.url}/api/me", headers={"x-api-key": token}).json()["name"] == "alice"
    basic = httpx.get(f"{gateway.url}/api/me", auth=("bob-claimed", token)).json()
    assert basic["name"] == "alice", "the Basic user name is ignored; identity comes from the token"


def test_tokens_are_stored_only_as_hashes(gateway: GatewayProcess) -> None:
    token = gateway.add_principal("alice")
    client = redis_sync.Redis.from_url(gateway.redis_url, decode_responses=True)
    try:
        for key in client.scan_iter("*"):
            kind = client.type(key)
            dump = {
                "string": lambda k: client.get(k),
                "hash": lambda k: str(client.hgetall(k)),
                "set": lambda k: str(client.smembers(k)),
                "stream": lambda k: str(client.xrange(k)),
                "list": lambda k: str(client.lrange(k, 0, -1)),
            }.get(kind, lambda k: "")(key)
            assert token not in (dump or "") and token not in key
            assert gateway.operator_token not in (dump or "")
    finally:
        client.close()
    assert len(token) >= len("ksw_") + 43, "at least 32 random bytes, url-safe base64"


def test_agents_cannot_create_principals_or_revoke(gateway: GatewayProcess) -> None:
    token = gateway.add_principal("alice")
    gateway.add_principal("bob")
    with gateway.client(token) as alice:
        assert alice.post("/api/principals", json={"name": "mallory", "kind": "operator"}).status_code == 403
        assert alice.delete("/api/principals/bob/tokens").status_code == 403
        assert alice.post("/api/principals/bob/tokens").status_code == 403
        assert alice.get("/metrics").status_code == 403


def test_principal_validation(gateway: GatewayProcess) -> None:
    with gateway.client(gateway.operator_token) as op:
        assert op.post("/api/principals", json={"name": "Bad Name"}).status_code == 400
        assert op.post("/api/principals", json={"name": "all"}).status_code == 400
        assert op.post("/api/principals", json={"name": "alice"}).status_code == 201
        dup = op.post("/api/principals", json={"name": "alice"})
        assert dup.status_code == 409 and "already exists" in dup.json()["detail"]
        assert op.post("/api/principals", json={"name": "x", "kind": "god"}).status_code == 422


def test_disabled_principal_is_locked_out_until_enabled(gateway: GatewayProcess) -> None:
    token = gateway.add_principal("alice")
    bob = gateway.add_principal("bob")
    with gateway.client(bob) as c:
        assert c.post("/api/principals/alice/disable").status_code == 403, "agents cannot quarantine"
    with gateway.client(gateway.operator_token) as op:
        assert op.post("/api/principals/alice/disable").json()["disabled"] is True
        assert op.post("/api/principals/nobody/disable").status_code == 404
    with gateway.client(token) as alice:
        assert alice.get("/api/me").status_code == 401
    with gateway.client(gateway.operator_token) as op:
        assert op.post("/api/principals/alice/enable").json()["disabled"] is False
    with gateway.client(token) as alice:
        assert alice.get("/api/me").status_code == 200
