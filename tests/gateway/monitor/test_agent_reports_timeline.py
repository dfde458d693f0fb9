"""A real agent process (``python -m agents``, the scripted model) reports its timeline as it works:
the DM that woke it, its model call, its tool call with the arguments and the result, the end of the
wake — and its log no longer holds a line per heartbeat."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from monitor_kit import MonitorGateway

from kstest.waiting import wait_for


def test_a_dm_wake_shows_up_on_the_agents_timeline(mon_gateway: MonitorGateway, short_tmp: Path) -> None:
    gw = mon_gateway
    token = gw.add_principal("bot")
    (short_tmp / "token").write_text(token + "\n")
    for sub in ("history", "work", "memory"):
        (short_tmp / sub).mkdir()
    env = {
        "PATH": "/usr/bin:/bin",
        "KSWARM_AGENT": "bot",
        "KSWARM_GATEWAY_SOCKET": str(gw.socket_path),
        "KSWARM_TOKEN_FILE": str(short_tmp / "token"),
        "KSWARM_HEARTBEAT_S": "0.2",
        "KSWARM_HISTORY": str(short_tmp / "history"),
        "KSWARM_WORK": str(short_tmp / "work"),
        "KSWARM_MEMORY": str(short_tmp / "memory"),
        "KSWARM_MODEL": "scripted",
    }
    log_path = short_tmp / "agent.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agents"], env=env, stdout=log_file, stderr=subprocess.STDOUT
        )
    op = gw.operator_token

    def kinds() -> list[str]:
        with gw.client(op) as c:
            page = c.get("/api/agents/bot/timeline", params={"limit": 100}).json()
        return [e["kind"] for e in reversed(page["entries"])]

    try:
        wait_for(lambda: "start" in kinds(), timeout=60, what="the agent's start entry")
        with gw.client(op) as c:
            assert c.post("/api/dms/bot/messages", json={"text": "hello bot"}).status_code == 201
        wait_for(lambda: "stop" in kinds(), timeout=60, what="a whole wake on the timeline")
        with gw.client(op) as c:
            page = c.get("/api/agents/bot/timeline", params={"limit": 100}).json()
        entries = list(reversed(page["entries"]))
        order = [e["kind"] for e in entries]
        assert order.index("start") < order.index("wake") < order.index("model") < order.index("stop")
        wake = next(e for e in entries if e["kind"] == "wake")
        assert "hello bot" in str(wake["data"]) and all(e["agent"] == "bot" for e in entries)
        call = next(e for e in entries if e["kind"] == "tool_call")
        result = next(e for e in entries if e["kind"] == "tool_result" and e["call_id"] == call["call_id"])
        assert call["data"]["name"] == result["data"]["name"] and call["data"].get("input") is not None
        model = next(e for e in entries if e["kind"] == "model")
        assert "in /" in model["summary"] and "out tokens" in model["summary"]
        # Its beats reached the gateway many times; the log says so in no line per beat.
        with gw.client(op) as c:
            assert any(a["name"] == "bot" and a["last_heartbeat"] for a in c.get("/api/agents").json())
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    out = log_path.read_text()
    assert proc.returncode == 0, out
    assert "/api/heartbeat" not in out, "no HTTP request line per heartbeat"
    assert sum("heartbeat" in line for line in out.splitlines()) <= 2, out
