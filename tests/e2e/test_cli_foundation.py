"""The newcomer's path: `kswarm up`, two `kswarm agent add`, a DM between agents, `chat tail`."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from kstest.cli import KSWARM, Up, cli_env, kswarm
from kstest.gateway import free_port


def redis_servers_under(home: Path) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "redis-server" in cmd and str(home) in cmd:
                found.append(cmd)
    return found


def test_up_agents_dm_tail_and_clean_stop(short_tmp: Path) -> None:
    home = short_tmp / "h"
    port = free_port()
    up = Up(home, port)
    try:
        up.wait_ready()
        token_file = home / "operator.token"
        operator_token = token_file.read_text().strip()
        assert oct(token_file.stat().st_mode & 0o777) == "0o600"
        up.wait_output(f"http://127.0.0.1:{port}", operator_token)

        second = kswarm(home, "up", "--port", str(free_port()))
        assert second.returncode == 1 and "already up" in second.stderr

        added = {}
        for name in ("alice", "bob"):
            result = kswarm(home, "agent", "add", name)
            assert result.returncode == 0, result.stderr
            added[name] = result.stdout.strip().splitlines()[-1]
            assert added[name].startswith("ksw_")
        listing = kswarm(home, "agent", "list", "--json")
        emails = {a["agent"]: a["email"] for a in json.loads(listing.stdout)}
        assert emails["alice"] == "alice@agents.kswarm" and emails["bob"] == "bob@agents.kswarm"

        follower = subprocess.Popen(
            [KSWARM, "chat", "tail", "-f", "-n", "0"],
            env=cli_env(home, KSWARM_TOKEN=added["bob"]),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(2)
        sent = kswarm(home, "chat", "send", "@bob", "hello bob, from alice", token=added["alice"])
        assert sent.returncode == 0, sent.stderr
        assert kswarm(home, "chat", "send", "general", "morning @all").returncode == 0

        tail = kswarm(home, "chat", "tail", token=added["bob"])
        assert "alice: hello bob, from alice" in tail.stdout
        assert "operator: morning @all" in tail.stdout

        # A third agent's view of the same tail does not include the DM.
        assert kswarm(home, "agent", "add", "carol").returncode == 0
        carol_token = kswarm(home, "agent", "add", "dave").stdout.strip().splitlines()[-1]
        assert "hello bob" not in kswarm(home, "chat", "tail", token=carol_token).stdout

        time.sleep(1)
        follower.terminate()
        followed, _ = follower.communicate(timeout=10)
        assert "alice: hello bob, from alice" in followed and "operator: morning @all" in followed

        bad = kswarm(home, "chat", "send", "general", "hi @ghost")
        assert bad.returncode == 2 and "@ghost" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
        assert bad.stderr.startswith("error: bad input: ")

        # A wrong token is refused by every command, with one line and exit 1 (never a table).
        for argv in (("agent", "list"), ("chat", "tail"), ("prs",), ("jobs",), ("tasks", "list")):
            refused = kswarm(home, *argv, token="ksw_" + "A" * 43)
            assert refused.returncode == 1 and refused.stdout == "", (argv, refused.stdout)
            assert refused.stderr.startswith("error: the gateway refused the token: "), refused.stderr
    finally:
        code = up.stop()
    assert code == 0, up.output()
    assert not (home / "gateway.json").exists()
    assert redis_servers_under(home) == [], "the embedded Redis stops with kswarm up"

    # Up again: same operator token, history kept (AOF).
    up = Up(home, port)
    try:
        up.wait_ready()
        assert (home / "operator.token").read_text().strip() == operator_token
        assert "alice: hello bob" in kswarm(home, "chat", "tail", token=added["bob"]).stdout
    finally:
        assert up.stop() == 0


def test_clients_without_a_gateway_fail_clearly(short_tmp: Path) -> None:
    home = (short_tmp / "empty").resolve()
    result = kswarm(home, "agent", "list")
    assert result.returncode == 3
    assert result.stderr.strip() == (
        f"error: no gateway: none is running for {home} (start one with `kswarm up --home {home}`, "
        "or set KSWARM_URL)"
    )
