"""The loop as its own process, configured the way the orchestrator configures it (environment only)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kstest.gateway import GatewayThread

ENTRY = "from agents.loop import serve; raise SystemExit(serve())"


def test_agent_process_answers_a_dm_offline_and_stops_on_sigterm(
    gateway: GatewayThread, short_tmp: Path
) -> None:
    token = gateway.add_principal("bot")
    data = short_tmp / "bot"
    for d in ("home/.kswarm", "work", "memory", "history"):
        (data / d).mkdir(parents=True)
    (data / "home/.kswarm/token").write_text(token + "\n")
    (data / "home/.gitconfig").write_text("[user]\n\tname = someone-else\n\temail = wrong@example.com\n")
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "HOME": str(data / "home"),
        "GIT_CONFIG_GLOBAL": str(data / "home/.gitconfig"),
        "KSWARM_AGENT": "bot",
        "KSWARM_SWARM": "test",
        "KSWARM_ROLE": "developer",
        "KSWARM_MODEL": "scripted",
        "KSWARM_WORK": str(data / "work"),
        "KSWARM_MEMORY": str(data / "memory"),
        "KSWARM_HISTORY": str(data / "history"),
        "KSWARM_TOKEN_FILE": str(data / "home/.kswarm/token"),
        "KSWARM_GATEWAY_SOCKET": str(gateway.socket_path),
        "KSWARM_HEARTBEAT_S": "0.5",
        "KSWARM_AGENT_INBOX_WAIT_S": "2",
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", ENTRY], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        with gateway.client(gateway.operator_token) as op:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and proc.poll() is None:
                state = {a["name"]: a["state"] for a in op.get("/api/agents").json()}.get("bot")
                if state == "idle":
                    break
                time.sleep(0.1)
            op.post("/api/dms/bot/messages", json={"text": "hello from the operator"}).raise_for_status()
            answer: list[dict] = []
            while time.monotonic() < deadline and not answer and proc.poll() is None:
                msgs = op.get("/api/channels/dm:bot:operator/messages").json()["messages"]
                answer = [m for m in msgs if m["sender"] == "bot"]
                time.sleep(0.1)
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert answer and answer[0]["text"].startswith("Got it, operator"), out.decode()[-3000:]
    assert proc.returncode == 0, out.decode()[-3000:]
    log = subprocess.run(
        ["git", "log", "--format=%an <%ae>"], cwd=data / "work", capture_output=True, text=True, env=env
    )  # the commit carries the gateway's identity, not the (wrong) global git config
    assert log.stdout.strip() == "bot <bot@agents.test>"
    assert (data / "history/transcript.jsonl").exists() and (data / "history/context.json").exists()


STUBBORN = """
import asyncio
import agents.loop as loop
from agents.config import AgentConfig

async def stubborn(config, heartbeat=None, model=None):
    print("up", flush=True)
    try:
        await asyncio.sleep(3600)
    finally:  # a clean-up that never ends (a gateway that never answers the session's close)
        await asyncio.shield(asyncio.sleep(3600))

loop.run_agent = stubborn
loop.STOP_GRACE_S = 0.5
raise SystemExit(loop.serve(AgentConfig.load()))
"""


def test_a_stop_ends_even_when_a_clean_up_step_hangs(short_tmp: Path) -> None:
    """SIGTERM bounds the whole way out: an agent whose clean-up never finishes still exits 0 (the
    orchestrator would otherwise wait out its own timeout and SIGKILL it, losing the last log lines)."""
    token = short_tmp / "token"
    token.write_text("ksw_unused\n")
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "KSWARM_AGENT": "bot",
        "KSWARM_GATEWAY_SOCKET": str(short_tmp / "gw.sock"),
        "KSWARM_TOKEN_FILE": str(token),
        "KSWARM_WORK": str(short_tmp),
        "KSWARM_MEMORY": str(short_tmp),
        "KSWARM_HISTORY": str(short_tmp),
        "KSWARM_MODEL": "scripted",
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", STUBBORN], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"up"
        os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)  # far above the grace: a hang fails here
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out.decode()
    assert b"exiting without finishing the clean-up" in out
