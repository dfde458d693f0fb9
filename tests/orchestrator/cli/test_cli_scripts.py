"""The CLI in a pipe and in scripts (issue 24): no line wrapped when stdout is not a terminal, JSON where
a script reads the answer (also ``validate``'s errors), the documented exit code for every "not found",
and words that say what is true (``up -d`` twice, ``down`` twice, a job id's rule, chat's short ids)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import httpx
from cli_kit import Kswarm

from gateway.client import Missing
from kstest.cli import cli_env, kswarm
from kstest.gateway import GatewayThread, free_port
from orchestrator.cli.chat import short_id
from orchestrator.cli.lifecycle import UpLock

LONG_TITLE = "a task whose title is long " + "x" * 100 + " end-of-title"


def piped(home: Path, url: str, token: str, *argv: str, columns: str = "80") -> subprocess.CompletedProcess:
    """The real ``kswarm`` with stdout a pipe, in a terminal's width (COLUMNS=80), stdin not a terminal."""
    env = cli_env(home, KSWARM_URL=url, KSWARM_TOKEN=token)
    env["COLUMNS"] = columns
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *argv],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_table_piped_is_not_wrapped(gateway: GatewayThread, tmp_path: Path) -> None:
    with gateway.client(gateway.operator_token) as op:
        assert op.post("/api/tasks", json={"id": "t-long", "title": LONG_TITLE}).status_code == 201
    ran = piped(tmp_path, gateway.url, gateway.operator_token, "tasks", "list")
    assert ran.returncode == 0, ran.stderr
    rows = [line for line in ran.stdout.splitlines() if "t-long" in line]
    assert len(rows) == 1 and LONG_TITLE in rows[0], ran.stdout  # one row, one line, the whole title


def test_validate_json_prints_the_errors_and_exits_2(kswarm: Kswarm, tmp_path: Path) -> None:
    bad = tmp_path / "swarm.yaml"
    bad.write_text("swarm: s\nagents:\n  - name: dev\n    role: nope\n")
    ran = kswarm("validate", "-f", str(bad), "--json")
    assert ran.code == 2 and ran.stderr == "", ran
    answer = json.loads(ran.stdout)
    assert answer["valid"] is False and len(answer["errors"]) == 1
    assert answer["errors"][0].startswith(f"{bad}:4: agents[0].role: ")
    good = tmp_path / "good.yaml"
    good.write_text("swarm: s\nagents:\n  - name: dev\n")
    ran = kswarm("validate", "-f", str(good), "--json")
    assert ran.code == 0 and json.loads(ran.stdout)["valid"] is True


def test_the_timeline_of_no_agent_is_not_found(gateway: GatewayThread, kswarm: Kswarm) -> None:
    gateway.add_principal("zed")
    ran = kswarm("agent", "timeline", "nobody", url=gateway.url, token=gateway.operator_token)
    assert ran.code == Missing.exit_code == 4 and ran.stdout == "", ran
    assert ran.error_line() == "not found: no agent 'nobody' at this gateway (agents: zed)"
    ran = kswarm("agent", "timeline", "zed", url=gateway.url, token=gateway.operator_token)
    assert ran.code == 0 and "no timeline entries yet" in ran.stdout, "an agent with no entries exists"


def test_a_job_id_is_checked_by_the_gateways_rule(gateway: GatewayThread, kswarm: Kswarm) -> None:
    op = {"url": gateway.url, "token": gateway.operator_token}
    for wrong in ("j" + "a" * 11, "j" + "a" * 25, "J0123456789ab", "j-nosuch"):
        ran = kswarm("job", "show", wrong, **op)
        assert ran.code == 2, ran
        rule = "a job id is j and 12 to 24 lowercase hex digits"
        assert ran.error_line().startswith(f"bad input: {wrong!r} is not a job id: {rule}")
    for right in ("j" + "a" * 12, "j" + "0" * 24):  # what the gateway accepts: it looks, finds none
        ran = kswarm("job", "show", right, **op)
        assert ran.code == 4 and ran.error_line() == f"not found: no job {right} (HTTP 404)"


def test_chat_tail_shows_short_ids_and_a_reply_takes_one(gateway: GatewayThread, kswarm: Kswarm) -> None:
    op = {"url": gateway.url, "token": gateway.operator_token}
    first = json.loads(kswarm("chat", "send", "general", "which tolerance for fp16?", "--json", **op).stdout)
    short = short_id(first["id"])
    assert len(short) <= 8 and "-" not in short
    replied = kswarm("chat", "send", "general", "atol 1e-2", "--reply-to", short, "--json", **op)
    assert replied.code == 0, replied
    reply = json.loads(replied.stdout)
    assert reply["reply_to"] == first["id"], "the short id names the message it was shown for"
    shown = kswarm("chat", "tail", "general", **op).stdout.splitlines()
    assert any(f" {short} operator: which tolerance" in line for line in shown), shown
    assert any(f" {short_id(reply['id'])} ↳{short} operator: atol 1e-2" in line for line in shown), shown
    assert first["id"] not in "\n".join(shown), "no stream id in the text view"
    ran = kswarm("chat", "send", "general", "hi", "--reply-to", "999999", **op)
    assert ran.code == 4 and ran.error_line().startswith("not found: no message 999999 among the last ")


def test_up_d_twice_refuses_at_once_and_down_twice_stops_nothing(short_tmp: Path) -> None:
    home, port = short_tmp / "h", free_port()
    up = kswarm(home, "up", "-d", "--port", str(port), "--json", timeout=180)
    assert up.returncode == 0, up.stderr
    started = json.loads(up.stdout)
    try:
        assert started["url"] == f"http://127.0.0.1:{port}" and started["login_link"].startswith(
            started["ui"]
        )
        assert httpx.get(f"{started['url']}/healthz").status_code == 200
        again = kswarm(home, "up", "-d", "--port", str(free_port()))
        lines = again.stderr.strip().splitlines()
        assert again.returncode == 1 and again.stdout == "" and len(lines) == 1, again
        assert lines[0] == (
            f"error: kswarm is already up for {home} at {started['url']} (pid {started['pid']}); "
            "stop it with: kswarm down"
        )
    finally:
        down = kswarm(home, "down", timeout=180)
    assert down.returncode == 0, down.stderr
    assert (
        down.stdout.strip()
        == f"stopped kswarm up (pid {started['pid']}): 0 agent(s), its job workers, gateway and Redis"
    )
    second = kswarm(home, "down")
    assert second.returncode == 0 and second.stdout.strip() == (
        f"nothing was running for {home}: kswarm up and its agents were already stopped"
    )


def test_up_while_another_up_is_starting_refuses_at_once(short_tmp: Path) -> None:
    """The first ``up`` holds the home's lock before its gateway answers: a second one, on another
    port, must not start a second gateway on the same home (nor blame the port)."""
    home = short_tmp / "h"
    home.mkdir()
    starting = UpLock(home)
    assert starting.acquire()
    with socket.socket() as busy:  # a port in use too: the home's reason comes first
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        for detach in (["-d"], []):
            ran = kswarm(home, "up", *detach, "--port", str(busy.getsockname()[1]), timeout=60)
            assert ran.returncode == 1 and ran.stderr.strip() == (
                f"error: kswarm up is already starting for {home}; wait for it, or stop it with: kswarm down"
            ), ran
    assert not (home / "gateway.json").exists()
