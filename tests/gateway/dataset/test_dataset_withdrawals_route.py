"""``GET /api/dataset/withdrawals?repo=``: any principal reads the kernels withdrawn from a repo's accepted
split; nothing writes them but the heal (``WithdrawalStore``). Attacks: an agent tries every method on
the route and every dataset route that could take a body, to withdraw a rival's kernel without a
confirmed counterexample."""

from __future__ import annotations

import time

import redis as redis_sync
from fastapi.routing import APIRoute

from gateway.dataset.withdrawals import KEY_PREFIX, Withdrawal, withdrawal_key
from kstest.gateway import GatewayThread

REPO = "kswarm/dataset"


def seed(gateway: GatewayThread) -> Withdrawal:
    w = Withdrawal(
        repo=REPO, task="softmax", kernel="kernels/softmax/k.py", sha="a" * 40, reason="fails cx1",
        counterexample="cx0123456789ab", job="j1", author="dev-1", at=time.time(),
    )  # fmt: skip
    client = redis_sync.Redis.from_url(gateway.redis_url)
    client.hset(KEY_PREFIX + REPO, withdrawal_key(w.kernel, w.sha), w.model_dump_json())
    client.close()
    return w


def stored(gateway: GatewayThread) -> dict[bytes, bytes]:
    client = redis_sync.Redis.from_url(gateway.redis_url)
    try:
        return dict(client.hgetall(KEY_PREFIX + REPO))
    finally:
        client.close()


def test_any_principal_reads_the_withdrawals_of_a_repo(gateway: GatewayThread) -> None:
    w = seed(gateway)
    agent = gateway.add_principal("dev-2")
    with gateway.client(agent) as c:
        got = c.get("/api/dataset/withdrawals", params={"repo": REPO})
        assert got.status_code == 200, got.text
        assert [Withdrawal.model_validate(x) for x in got.json()] == [w]
        assert c.get("/api/dataset/withdrawals", params={"repo": "kswarm/other"}).json() == []
        assert c.get("/api/dataset/withdrawals").status_code == 422, "the repo is required"
        bad = c.get("/api/dataset/withdrawals", params={"repo": "../../etc"})
        assert bad.status_code == 422 and "repo" in bad.text
    with gateway.client(None) as anon:
        assert anon.get("/api/dataset/withdrawals", params={"repo": REPO}).status_code == 401


def test_an_agent_cannot_create_or_remove_a_withdrawal_through_any_dataset_route(
    gateway: GatewayThread,
) -> None:
    seed(gateway)
    before = stored(gateway)
    forged = {
        "repo": REPO, "task": "add", "kernel": "kernels/add/rival.py", "sha": "b" * 40, "reason": "I say so",
        "counterexample": "cx0123456789ab", "job": "j2", "author": "rival", "at": time.time(),
    }  # fmt: skip
    agent = gateway.add_principal("mallory")
    with gateway.client(agent) as c:
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            reply = c.request(method, "/api/dataset/withdrawals", params={"repo": REPO}, json=forged)
            assert reply.status_code == 405, (method, reply.status_code, reply.text)
            deeper = c.request(method, f"/api/dataset/withdrawals/{REPO}", json=forged)
            assert deeper.status_code in (404, 405), (method, deeper.status_code)
    # No dataset route takes anything but GET: there is no other door to the store.
    assert gateway.app is not None
    writers = [
        (r.path, sorted(r.methods - {"GET", "HEAD"}))
        for r in gateway.app.routes
        if isinstance(r, APIRoute) and r.path.startswith("/api/dataset") and r.methods - {"GET", "HEAD"}
    ]
    assert writers == []
    assert stored(gateway) == before, "the store is unchanged"
