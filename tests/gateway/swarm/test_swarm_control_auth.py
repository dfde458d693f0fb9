"""Attacks on the swarm control seam: who may post a control request, and what a request may claim.

Control requests reach the supervisor through the gateway only (``/api/swarm/...`` and the UI's
``/ui/agents/...``); both take the requester from the token and the agent and action from the path.
"""

from __future__ import annotations

import time

import httpx
import pytest
import redis as redis_sync
from swarm_kit import control_requests, report, running, supervised_swarm, ui_session

from kstest.gateway import GatewayThread
from kstest.waiting import wait_for
from orchestrator.supervisor.main import Supervisor

CONTROL = "ks:swarm:control"


def control_entries(gw: GatewayThread) -> list:
    client = redis_sync.Redis.from_url(gw.redis_url, decode_responses=True)
    try:
        return client.xrange(CONTROL) if client.exists(CONTROL) else []
    finally:
        client.close()


def test_agent_and_worker_tokens_cannot_post_control_requests(gateway: GatewayThread) -> None:
    dev = gateway.add_principal("dev-1")
    mallory = gateway.add_principal("mallory")
    worker = gateway.add_principal("node-7", kind="worker")
    gate = gateway.add_principal("gatebot", kind="gate")
    for token in (mallory, worker, gate):
        with gateway.client(token) as attacker:
            for action in ("restart", "quarantine", "release", "snapshot", "rollback", "reset"):
                reply = attacker.post(f"/api/swarm/agents/dev-1/{action}", json={"snapshot": "x"})
                assert reply.status_code == 403, (action, reply.status_code, reply.text)
                # Nor through the UI, by bearer or through its /api bridge.
                assert attacker.post(f"/ui/agents/dev-1/{action}").status_code == 403
                assert attacker.post(f"/ui/api/swarm/agents/dev-1/{action}").status_code == 403
            assert attacker.get("/api/swarm").status_code == 403  # the swarm's view is the operator's
            assert attacker.get("/api/swarm/agents/dev-1/memory").status_code == 403
    assert control_entries(gateway) == [], "a refused request must not reach the stream"
    with gateway.client(dev) as victim:
        assert victim.get("/api/me").status_code == 200, "dev-1's token must survive the attempts"


def test_a_cookie_session_needs_the_csrf_token_and_the_same_origin(gateway: GatewayThread) -> None:
    with httpx.Client(base_url=gateway.url, timeout=30) as browser:
        assert browser.post("/ui/login", data={"token": gateway.operator_token}).status_code == 303
        for path in ("/ui/agents/dev-1/quarantine", "/ui/api/swarm/agents/dev-1/quarantine"):
            assert browser.post(path).status_code == 403, path
            cross = browser.post(path, headers={"Sec-Fetch-Site": "cross-site", "X-CSRF-Token": "x"})
            assert cross.status_code == 403, path
    assert control_entries(gateway) == []


def test_a_revoked_operator_token_is_401(gateway: GatewayThread) -> None:
    second = gateway.add_principal("op-2", kind="operator")
    with gateway.client(gateway.operator_token) as op:
        assert op.delete("/api/principals/op-2/tokens").status_code == 200
    with gateway.client(second) as stale:
        assert stale.post("/api/swarm/agents/dev-1/restart").status_code == 401
    assert control_entries(gateway) == []


@pytest.mark.slow
def test_forged_request_fields_are_ignored_and_only_swarm_agents_are_acted_on(gateway: GatewayThread) -> None:
    worker = gateway.add_principal("node-7", kind="worker")
    with supervised_swarm(gateway) as supervisor:
        wait_for(lambda: running(gateway, "dev-1", "dev-2"), 60, "both agents running")
        dev2_token = supervisor.layout.token_file("dev-2").read_text().strip()
        since = time.time()
        # Everything a request carries, forged in the body: who asks, for whom, what, when, the answer.
        forged = {
            "requester": "dev-2",
            "agent": "dev-2",
            "action": "quarantine",
            "requested_at": 1.0,
            "status": "done",
            "request_id": "0-1",
            "label": "mine",
        }
        with gateway.client(gateway.operator_token) as op:
            reply = op.post("/api/swarm/agents/dev-1/snapshot", json=forged)
            assert reply.status_code == 200, reply.text
            assert reply.json()["agent"] == "dev-1" and reply.json()["action"] == "snapshot"
        with ui_session(gateway) as browser:
            ui = browser.post(
                "/ui/agents/dev-1/snapshot", json=forged, headers={"X-CSRF-Token": browser.csrf}
            )
            assert ui.status_code == 200, ui.text
        posted = [request for _, request in control_requests(gateway)]
        assert [(r.action, r.agent, r.requester) for r in posted] == [("snapshot", "dev-1", "operator")] * 2
        assert all(r.requested_at >= since for r in posted)
        assert [s for s in supervisor_snapshots(supervisor, "dev-1") if s.endswith("-mine")], "label kept"
        # dev-2 was never touched.
        now = report(gateway)
        dev2 = next(a for a in now.agents if a.name == "dev-2")
        assert dev2.running and not dev2.quarantined
        with gateway.client(dev2_token) as dev2_client:
            assert dev2_client.get("/api/me").status_code == 200

        with gateway.client(gateway.operator_token) as op:
            # Not an agent of the swarm: nothing revoked, nothing posted.
            for victim in ("operator", "node-7", "nobody"):
                refused = op.post(f"/api/swarm/agents/{victim}/quarantine")
                assert refused.status_code == 409, (victim, refused.text)
            # A snapshot label is a path component: only a plain suffix passes.
            assert op.post("/api/swarm/agents/dev-1/snapshot", json={"label": "../../x"}).status_code == 422
            assert op.post("/api/swarm/agents/..%2F..%2Fetc/restart").status_code in (404, 422)
            bad = op.post("/api/swarm/agents/dev-1/rollback", json={"snapshot": "../../etc"})
            assert bad.status_code == 409 and "no snapshot" in bad.json()["detail"]
            assert op.get("/api/me").status_code == 200
        with gateway.client(worker) as node:
            assert node.get("/api/me").status_code == 200
        assert len(control_requests(gateway)) == 3  # the two snapshots and the refused rollback


def supervisor_snapshots(supervisor: Supervisor, name: str) -> list[str]:
    root = supervisor.layout.snapshots(name)
    return sorted(p.name for p in root.iterdir()) if root.exists() else []
