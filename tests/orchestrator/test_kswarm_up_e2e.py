"""The issue's "done when", through the real CLI: init, up -f, ps, kill an agent, kill kswarm up, down."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from kstest.cli import Up, kswarm
from kstest.gateway import free_port
from kstest.waiting import wait_for
from orchestrator.runtime.process import proc_env


def ps(home: Path) -> list[dict]:
    done = kswarm(home, "ps", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def all_heartbeating(home: Path, since: float, n: int) -> bool:
    rows = ps(home)
    now = time.time()
    return len(rows) == n and all(
        r["state"] in ("running", "idle")
        and r["last_heartbeat_s"] is not None
        and now - r["last_heartbeat_s"] > since
        for r in rows
    )


def copies(swarm: str, name: str) -> int:
    found = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            env = proc_env(int(entry.name))
            found += env.get("KSWARM_AGENT") == name and env.get("KSWARM_SWARM") == swarm
    return found


@pytest.mark.slow
def test_init_up_ps_heal_adopt_down(short_tmp: Path, monkeypatch) -> None:
    home = short_tmp / "home"
    monkeypatch.chdir(short_tmp)
    spec_file = short_tmp / "swarm.yaml"
    assert kswarm(home, "init", "-f", str(spec_file)).returncode == 0
    # Faster timing than the template's, same file otherwise.
    spec_file.write_text(spec_file.read_text().replace("heartbeat_s: 5 ", "heartbeat_s: 1 "))
    names = ["lead", "dev-1", "dev-2", "dev-3", "reviewer"]
    up = Up(home, free_port(), "-f", str(spec_file), "--backend", "process")
    try:
        up.wait_ready()
        started = time.time()
        wait_for(lambda: all_heartbeating(home, started, len(names)), 60, "5 agents heartbeating")

        record = json.loads((home / "swarm" / "agents" / "dev-2.proc.json").read_text())
        os.kill(record["pid"], signal.SIGKILL)
        killed = time.time()
        wait_for(lambda: {r["agent"]: r for r in ps(home)}["dev-2"]["restarts"] == 1, 30, "dev-2 restarted")
        wait_for(lambda: all_heartbeating(home, killed, len(names)), 30, "dev-2 heartbeating again")

        # The orchestrator itself dies hard; a new `kswarm up` adopts the agents it left running.
        pids = {
            n: json.loads((home / "swarm" / "agents" / f"{n}.proc.json").read_text())["pid"] for n in names
        }
        os.kill(up.proc.pid, signal.SIGKILL)
        up.proc.wait(10)
        (home / "gateway.json").unlink(missing_ok=True)
        up = Up(home, free_port(), "-f", str(spec_file), "--backend", "process")
        up.wait_ready()
        again = time.time()
        wait_for(lambda: all_heartbeating(home, again, len(names)), 60, "heartbeats after the new kswarm up")
        for n in names:
            now_pid = json.loads((home / "swarm" / "agents" / f"{n}.proc.json").read_text())["pid"]
            assert now_pid == pids[n], f"{n} was restarted, not adopted"
            assert copies("kernels", n) == 1
    finally:
        down = kswarm(home, "down", "--purge")
        up.stop()
    assert down.returncode == 0, down.stderr
    assert all(copies("kernels", n) == 0 for n in names)
