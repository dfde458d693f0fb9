"""Operator actions (``/api/actions/...`` and the UI's ``/ui/api/actions/...``): operators only, the UI's
only with the session's CSRF token, each audited in ``/api/monitor/actions`` and announced in the chat.

Attacks: an agent's and a worker's token on every action route; a logged-in browser session whose
request lacks the CSRF token, or carries another session's; an operator cookie replayed by a
cross-site form (no token at all).
"""

from __future__ import annotations

import httpx
import pytest
from monitor_kit import MonitorGateway, log_in

ACTIONS = [
    ("/api/actions/prs/kswarm/kernels/1/review", {"event": "approve", "body": "lgtm"}),
    ("/api/actions/prs/kswarm/kernels/1/comment", {"body": "see #reviews"}),
    ("/api/actions/jobs/j0123456789abcdef/cancel", {}),
    ("/api/actions/jobs/j0123456789abcdef/requeue", {}),
    ("/api/actions/jobs/j0123456789abcdef/resubmit", {}),
    ("/api/actions/tasks", {"id": "softmax-attack", "title": "posted by an attacker"}),
    ("/api/actions/tasks/softmax/release", {}),
    ("/api/actions/tasks/softmax/reassign", {"agent": "dev-1"}),
    ("/api/attention/agent:dev-1/ack", {}),
]


def audited(gw: MonitorGateway) -> list[dict]:
    with gw.client(gw.operator_token) as op:
        reply = op.get("/api/monitor/actions")
    assert reply.status_code == 200, reply.text
    return reply.json()


def board(gw: MonitorGateway) -> set[str]:
    with gw.client(gw.operator_token) as op:
        return {t["id"] for t in op.get("/api/tasks").json()}


@pytest.mark.parametrize("kind", ["agent", "worker"])
def test_no_agent_or_worker_token_acts_as_an_operator(mon_gateway: MonitorGateway, kind: str) -> None:
    token = mon_gateway.add_principal(f"{kind}-x" if kind == "worker" else "dev-1", kind)
    with mon_gateway.client(token) as c:
        for path, body in ACTIONS:
            reply = c.post(path, json=body)
            assert reply.status_code == 403, f"{path}: {reply.status_code} {reply.text}"
            assert "detail" in reply.json()
        # Nor through the audit log or Attention (what an attacker would read to pick a target).
        assert c.get("/api/monitor/actions").status_code == 403
        assert c.get("/api/attention").status_code == 403
    assert audited(mon_gateway) == []
    assert "softmax-attack" not in board(mon_gateway)


def test_an_agent_token_cannot_open_a_ui_session(mon_gateway: MonitorGateway) -> None:
    dev = mon_gateway.add_principal("dev-1")
    with httpx.Client(base_url=mon_gateway.url, timeout=30) as browser:
        reply = browser.post("/ui/login", data={"token": dev, "next": "/ui/attention"})
        assert reply.status_code == 403
        # No session: the bridge refuses even with a made-up CSRF token.
        reply = browser.post(
            "/ui/api/actions/tasks", json={"id": "t-x", "title": "x"}, headers={"X-CSRF-Token": "x"}
        )
        assert reply.status_code in (401, 403)
    assert "t-x" not in board(mon_gateway)


def test_ui_actions_need_the_sessions_csrf_token(mon_gateway: MonitorGateway) -> None:
    task = {"id": "softmax-ui", "title": "Softmax from the UI"}
    with httpx.Client(base_url=mon_gateway.url, timeout=30) as other:
        other_csrf = log_in(mon_gateway, other)
    with httpx.Client(base_url=mon_gateway.url, timeout=30) as browser:
        csrf = log_in(mon_gateway, browser)
        assert other_csrf != csrf
        # Missing, wrong, and another session's token: refused, nothing done, nothing audited.
        for headers in ({}, {"X-CSRF-Token": "forged"}, {"X-CSRF-Token": other_csrf}):
            reply = browser.post("/ui/api/actions/tasks", json=task, headers=headers)
            assert reply.status_code == 403, reply.text
        # A cross-site form post: a form body, no header, no token field.
        reply = browser.post("/ui/api/actions/tasks", data=task)
        assert reply.status_code == 403
        assert "softmax-ui" not in board(mon_gateway)
        assert audited(mon_gateway) == []
        # With the session's token the action is done, as the session's operator, and audited.
        reply = browser.post("/ui/api/actions/tasks", json=task, headers={"X-CSRF-Token": csrf})
        assert reply.status_code == 200, reply.text
        assert reply.json()["ok"] is True
    assert "softmax-ui" in board(mon_gateway)
    [record] = audited(mon_gateway)
    assert (record["operator"], record["action"], record["target"], record["outcome"]) == (
        "operator",
        "task:post",
        "softmax-ui",
        "done",
    )


def test_a_refused_action_is_audited_with_the_components_answer(mon_gateway: MonitorGateway) -> None:
    with mon_gateway.client(mon_gateway.operator_token) as op:
        reply = op.post("/api/actions/jobs/j0123456789abcdef/cancel")
        assert reply.status_code == 404, reply.text
        reply = op.post("/api/actions/tasks/no-such-task/release")
        assert reply.status_code == 404, reply.text
        # Bad input is a clear 422, not a 500: an unknown review event, an empty comment.
        assert op.post("/api/actions/prs/kswarm/kernels/1/review", json={"event": "merge"}).status_code == 422
        assert op.post("/api/actions/prs/kswarm/kernels/1/comment", json={"body": ""}).status_code == 422
    outcomes = {(r["action"], r["outcome"]) for r in audited(mon_gateway)}
    assert outcomes == {("job:cancel", "refused"), ("task:release", "refused")}
