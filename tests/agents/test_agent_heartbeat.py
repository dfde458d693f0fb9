"""``python -m agents`` as the orchestrator starts it: heartbeats over the unix socket, wakes on a DM,
exits 0 on SIGTERM, and waits out a revoked token instead of crash-looping."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kstest.gateway import GatewayProcess


def agent_env(gateway: GatewayProcess, tmp: Path, token: str) -> dict[str, str]:
    token_file = tmp / "token"
    token_file.write_text(token + "\n")
    for sub in ("history", "work", "memory"):
        (tmp / sub).mkdir()
    return {
        "PATH": "/usr/bin:/bin",
        "KSWARM_AGENT": "bot",
        "KSWARM_GATEWAY_SOCKET": str(gateway.socket_path),
        "KSWARM_TOKEN_FILE": str(token_file),
        "KSWARM_HEARTBEAT_S": "0.5",
        "KSWARM_HISTORY": str(tmp / "history"),
        "KSWARM_WORK": str(tmp / "work"),
        "KSWARM_MEMORY": str(tmp / "memory"),
        "KSWARM_MODEL": "scripted",
    }


def beat_of(gateway: GatewayProcess, name: str) -> float | None:
    with gateway.client(gateway.operator_token) as client:
        agents = {a["name"]: a for a in client.get("/api/agents").json()}
    return agents.get(name, {}).get("last_heartbeat")


def test_agent_heartbeats_receives_dms_and_stops_cleanly(gateway: GatewayProcess, short_tmp: Path) -> None:
    token = gateway.add_principal("bot")
    env = agent_env(gateway, short_tmp, token)
    proc = subprocess.Popen(
        [sys.executable, "-m", "agents"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 20
        while not beat_of(gateway, "bot") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert beat_of(gateway, "bot")
        with gateway.client(gateway.operator_token) as client:
            client.post("/api/dms/bot/messages", json={"text": "hello bot"}).raise_for_status()
        transcript = short_tmp / "history" / "transcript.jsonl"

        def wakes() -> list[dict]:
            if not transcript.exists():
                return []
            records = [json.loads(line) for line in transcript.read_text().splitlines() if line.strip()]
            return [r for r in records if r.get("type") == "wake"]

        while not wakes() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "hello bot" in json.dumps(wakes()[0])
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0, out.decode()
    assert b"agent bot up" in out


def test_agent_survives_a_revoked_token_without_crashing(gateway: GatewayProcess, short_tmp: Path) -> None:
    env = agent_env(gateway, short_tmp, "ksw_not_a_valid_token")
    log_path = short_tmp / "agent.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agents"], env=env, stdout=log_file, stderr=subprocess.STDOUT
        )
    try:
        # Wait for the refusal to be logged (its start-up time depends on the machine's load), then for
        # a second attempt: it retries instead of exiting.
        deadline = time.monotonic() + 60
        while (
            log_path.read_bytes().count(b"the gateway refused the token: ") < 2
            and time.monotonic() < deadline
        ):
            assert proc.poll() is None, log_path.read_text()  # no crash-loop: it waits for the orchestrator
            time.sleep(0.1)
        assert proc.poll() is None
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    out = log_path.read_bytes()
    assert b"the gateway refused the token: " in out and b"(HTTP 401)" in out
