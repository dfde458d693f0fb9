"""A restart of the gateway and of Redis loses no acknowledged message (AOF written before each reply)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from kstest.gateway import GatewayProcess
from orchestrator.local.embedded_redis import EmbeddedRedis


def test_kill_9_of_gateway_and_redis_loses_no_acknowledged_message(short_tmp: Path) -> None:
    redis_server = EmbeddedRedis(short_tmp / "r")
    url = redis_server.ensure_running()
    # 51 posts in a burst: above the default rate limit, which is not what this test is about.
    gw = GatewayProcess(short_tmp / "home", url, extra_env={"KSWARM_GATEWAY_RATE_LIMIT_BURST": "1000"})
    try:
        gw.start()
        alice = gw.add_principal("alice")
        bob = gw.add_principal("bob")
        acknowledged = []
        with gw.client(alice) as c:
            for i in range(50):
                reply = c.post("/api/channels/general/messages", json={"text": f"msg {i} @bob"})
                assert reply.status_code == 201
                acknowledged.append(reply.json()["id"])
            assert c.post("/api/dms/bob/messages", json={"text": "last words"}).status_code == 201

        # Both die without any chance to flush: the gateway holds nothing, Redis has its AOF.
        gw.stop(signal.SIGKILL)
        pid = redis_server.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)

        url_again = redis_server.ensure_running()
        assert url_again == url and redis_server.pid != pid
        gw.start()
        with gw.client(bob) as c:
            history = c.get("/api/channels/general/messages", params={"limit": 100}).json()["messages"]
            assert [m["id"] for m in history] == acknowledged
            items = c.get("/api/inbox", params={"limit": 100}).json()["items"]
            assert len(items) == 51 and items[-1]["text"] == "last words"
        with gw.client(alice) as c:
            assert c.get("/api/me").json()["name"] == "alice", "tokens survive too"
    finally:
        gw.stop()
        redis_server.release()
