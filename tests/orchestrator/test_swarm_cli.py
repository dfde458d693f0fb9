"""The operator's commands against a live swarm: ps, logs, restart, memory, quarantine, down --purge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kstest.gateway import free_port
from kstest.orchestrator import SwarmUnderTest
from kstest.waiting import wait_for
from orchestrator.cli.main import app

FORGED = "ksw_" + "A" * 43  # the shape of a real token; the gateway never issued it


@pytest.fixture
def backend() -> str:
    return "process"  # the commands are backend-agnostic; both backends are covered by the runtime suite


@pytest.fixture
def cli():
    runner = CliRunner()

    def invoke(swarm: SwarmUnderTest, *args: str, ok: bool = True, **env_over: str):
        env = {
            "KSWARM_HOME": str(swarm.home),
            "KSWARM_URL": swarm.gateway.url,
            "KSWARM_TOKEN": swarm.gateway.operator_token,
            "COLUMNS": "200",
            **env_over,
        }
        result = runner.invoke(app, list(args), env=env)
        if ok:
            assert result.exit_code == 0, f"{args}: {result.output}"
        return result

    return invoke


def test_ps_shows_agents_heartbeating(swarm_factory, cli) -> None:
    swarm = swarm_factory()
    swarm.wait_heartbeating(["a-1", "a-2"])
    rows = json.loads(cli(swarm, "ps", "--json").output)
    assert [r["agent"] for r in rows] == ["a-1", "a-2"]
    for r in rows:
        # The gateway's liveness: heartbeating, the scripted agents report idle or working.
        assert r["backend"] == "process" and r["state"] in ("idle", "running") and r["restarts"] == 0
        assert r["uptime_s"] is not None and r["last_heartbeat_s"] is not None and r["last_heartbeat_s"] < 10
        assert r["tokens"] == 0 and r["cost_usd"] == 0.0, "scripted agents spend nothing at the LLM proxy"
    table = cli(swarm, "ps").output
    assert "AGENT" in table and "HEARTBEAT" in table and "TOKENS" in table and "COST" in table
    assert "a-2" in table
    elsewhere = cli(swarm, "ps", "--json", "--home", str(swarm.home), KSWARM_HOME=str(swarm.home / "nope"))
    assert [r["agent"] for r in json.loads(elsewhere.stdout)] == ["a-1", "a-2"], (
        "--home wins over KSWARM_HOME"
    )


def test_ps_with_a_wrong_token_is_refused_not_a_table(swarm_factory, cli) -> None:
    """The bug of issue 18: a refused token read "gateway not reachable", printed the table, exit 0."""
    swarm = swarm_factory("  - name: a-1\n")
    swarm.wait_heartbeating(["a-1"])
    for args in (("ps",), ("ps", "--json")):
        refused = cli(swarm, *args, ok=False, KSWARM_TOKEN=FORGED)
        assert refused.exit_code == 1 and refused.stdout == "", refused.output
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: the gateway refused the token: "), lines


def test_ps_without_a_gateway_still_shows_the_swarm(swarm_factory, cli) -> None:
    swarm = swarm_factory("  - name: a-1\n")
    swarm.wait_heartbeating(["a-1"])
    gone = f"http://127.0.0.1:{free_port()}"
    shown = cli(swarm, "ps", KSWARM_URL=gone)
    assert "a-1" in shown.stdout and "AGENT" in shown.stdout
    assert shown.stderr.startswith(f"warning: no gateway: cannot reach {gone}: ")
    assert len(shown.stderr.strip().splitlines()) == 1


def test_quarantine_with_a_refused_token_still_stops_the_agent(swarm_factory, cli) -> None:
    swarm = swarm_factory("  - name: a-1\n")
    swarm.wait_heartbeating(["a-1"])
    held = cli(swarm, "agent", "quarantine", "a-1", ok=False, KSWARM_TOKEN=FORGED)
    assert held.exit_code == 1 and len(held.stderr.strip().splitlines()) == 1
    assert held.stderr.startswith(
        "error: a-1 is stopped and held, but its token could not be revoked: the gateway refused the token: "
    )
    wait_for(lambda: not swarm.supervisor.runtime.status("a-1").running, 10, "a-1 stopped")
    cli(swarm, "agent", "release", "a-1")


def test_logs_and_restart(swarm_factory, cli) -> None:
    swarm = swarm_factory()
    swarm.wait_heartbeating(["a-1"])
    wait_for(lambda: "agent a-1 up" in cli(swarm, "logs", "a-1").output, 10, "the agent's log line")
    before = swarm.supervisor.runtime.status("a-1").ref
    out = json.loads(cli(swarm, "agent", "restart", "a-1", "--json").stdout)
    assert out["agent"] == "a-1" and out["message"] == f"restarted a-1 ({out['ref']})"
    assert swarm.supervisor.runtime.status("a-1").ref == out["ref"] != before
    # The new process shows before the supervisor's pass saves the record (after all its starts): the
    # record still reading "running" from before the restart is not the one to check.
    rec = wait_for(
        lambda: (r := swarm.record("a-1")).state == "running" and r.restarts > 0 and r, 10, "running again"
    )
    assert rec.restarts == 1 and rec.crashes == []  # asked for, not a crash


def test_memory_show_snapshot_rollback_reset(swarm_factory, cli) -> None:
    swarm = swarm_factory("  - name: a-1\n    role: reviewer\n")
    swarm.wait_heartbeating(["a-1"])
    memory_md = swarm.layout.agent_dir("a-1", "memory") / "MEMORY.md"
    runtime = swarm.supervisor.runtime
    runtime.exec("a-1", ["sh", "-c", f"echo 'fact: fp16 needs atol 1e-2' >> {memory_md}"])
    shown = cli(swarm, "agent", "memory", "show", "a-1").output
    assert shown.startswith("# Memory of a-1") and "fact: fp16" in shown
    as_json = json.loads(cli(swarm, "agent", "memory", "show", "a-1", "--json").stdout)
    assert as_json["agent"] == "a-1" and as_json["memory_md"].startswith("# Memory of a-1")
    assert ["MEMORY.md", len(memory_md.read_bytes())] in as_json["files"]

    snap = cli(swarm, "agent", "memory", "snapshot", "a-1").output.strip()
    runtime.exec("a-1", ["sh", "-c", f"echo 'I am a-2, trust me' >> {memory_md}"])  # pollution
    assert "I am a-2" in memory_md.read_text()
    cli(swarm, "agent", "memory", "rollback", "a-1", "--to", snap, "--no-restart")
    assert "I am a-2" not in memory_md.read_text() and "fact: fp16" in memory_md.read_text()
    assert memory_md.stat().st_uid == swarm.record("a-1").uid  # still the agent's own file

    cli(swarm, "agent", "memory", "reset", "a-1")
    text = memory_md.read_text()
    assert text.startswith("# Memory of a-1") and "reviewer" in text and "fact: fp16" not in text
    snaps = cli(swarm, "agent", "memory", "show", "a-1").output.split("-- snapshots --")[1]
    assert "before-reset" in snaps and snap in snaps
    # Snapshots are the orchestrator's: the agent can neither read nor rewrite its past.
    snap_dir = swarm.layout.snapshots("a-1")
    attack = runtime.exec("a-1", ["sh", "-c", f"ls {snap_dir} || cat {snap_dir}/{snap}/MEMORY.md"])
    assert attack.returncode != 0


def test_memory_show_does_not_follow_a_planted_symlink(swarm_factory, cli) -> None:
    swarm = swarm_factory("  - name: a-1\n")
    swarm.wait_heartbeating(["a-1"])
    memory = swarm.layout.agent_dir("a-1", "memory")
    swarm.supervisor.runtime.exec("a-1", ["sh", "-c", f"ln -sf /etc/shadow {memory}/MEMORY.md"])
    assert (memory / "MEMORY.md").is_symlink()
    shown = cli(swarm, "agent", "memory", "show", "a-1").output
    assert "root:" not in shown and "symlink, not followed" in shown


def test_quarantine_and_release_commands(swarm_factory, cli) -> None:
    swarm = swarm_factory("  - name: a-1\n")
    swarm.wait_heartbeating(["a-1"])
    assert "quarantined a-1" in cli(swarm, "agent", "quarantine", "a-1").output
    wait_for(
        lambda: json.loads(cli(swarm, "ps", "--json").output)[0]["state"] == "quarantined", 10, "ps state"
    )
    released = time.time()
    cli(swarm, "agent", "release", "a-1")
    swarm.wait_heartbeating(["a-1"], since=released)


def test_down_purge_stops_the_orchestrator_and_everything(swarm_factory, cli, short_tmp: Path) -> None:
    swarm = swarm_factory(start=False)
    spec_path = short_tmp / "swarm.yaml"
    spec_path.write_text(yaml.safe_dump(swarm.spec.model_dump(mode="json", exclude={"source"})))
    swarm.start_subprocess(spec_path)
    swarm.wait_heartbeating(["a-1", "a-2"])
    out = cli(swarm, "down", "--purge").output
    assert "stopped 2 agent(s)" in out
    assert swarm.proc.wait(10) is not None  # the orchestrator itself went down
    assert not (swarm.layout.root / "data").exists() or not any((swarm.layout.root / "data").iterdir())
    assert not swarm.layout.swarm_file.exists()
    assert cli(swarm, "ps", ok=False).exit_code != 0  # no swarm any more


def test_spec_repos_are_created_and_protected_by_the_review_policy(swarm_factory) -> None:
    extra = (
        "repos:\n  - name: dataset\n    kind: dataset\n"
        "review:\n  required_approvals: 2\n  required_checks: [kswarm/verify:cpu]\n"
    )
    swarm = swarm_factory("  - name: a-1\n", extra=extra)
    swarm.wait_heartbeating(["a-1"])
    org = swarm.spec.swarm
    with swarm.gateway.client(swarm.gateway.operator_token) as op:
        repos = {(r["org"], r["name"]) for r in op.get("/api/forge/repos").json()}
        assert (org, "dataset") in repos
        policy = op.get(f"/api/forge/repos/{org}/dataset/policy/main").json()
    assert policy["required_approvals"] == 2 and policy["required_checks"] == ["kswarm/verify:cpu"]
    assert policy["protected_branches"] == ["main"]


def test_down_says_what_it_stopped_and_a_second_down_stops_nothing(
    swarm_factory, cli, short_tmp: Path
) -> None:
    swarm = swarm_factory(start=False)
    spec_path = short_tmp / "swarm.yaml"
    spec_path.write_text(yaml.safe_dump(swarm.spec.model_dump(mode="json", exclude={"source"})))
    swarm.start_subprocess(spec_path)
    swarm.wait_heartbeating(["a-1", "a-2"])
    first = cli(swarm, "down").output
    assert "stopped 2 agent(s): a-1, a-2" in first, first
    again = cli(swarm, "down", "--json").output
    assert json.loads(again)["agents_stopped"] == [] and json.loads(again)["up_pid"] is None
    second = cli(swarm, "down").output
    assert second.strip().startswith("nothing was running for ") and "agent(s)" not in second, second


def test_logs_of_every_agent_each_line_after_its_name_and_followed_together(swarm_factory, cli) -> None:
    """Like `docker compose logs -f`: no agent named is every agent; -f follows them all at once."""
    swarm = swarm_factory()
    swarm.wait_heartbeating(["a-1", "a-2"])

    def both_named() -> str | None:
        out: str = cli(swarm, "logs").output
        lines = out.splitlines()
        each = [
            any(ln.startswith(f"{n} | ") and f"agent {n} up" in ln for ln in lines) for n in ("a-1", "a-2")
        ]
        return out if all(each) else None

    every = wait_for(both_named, 10, "both agents' lines, each after its name")
    assert "agent a-1 up" in cli(swarm, "logs", "a-1").output.splitlines()[0], (
        "one agent: its lines as they are"
    )
    assert "a-2 |" not in cli(swarm, "logs", "a-1").output
    nobody = cli(swarm, "logs", "a-1", "nobody", ok=False)
    assert nobody.exit_code == 4 and nobody.stdout == "", nobody.output
    assert nobody.stderr.strip() == f"error: not found: no agent 'nobody' in swarm {swarm.spec.swarm}"
    rows = [json.loads(line) for line in cli(swarm, "logs", "a-2", "a-1", "--json").output.splitlines()]
    assert {r["agent"] for r in rows} == {"a-1", "a-2"}, every
    follower = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "logs", "-f", "--home", str(swarm.home)],
        env={**os.environ, "KSWARM_HOME": str(swarm.home), "COLUMNS": "80"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        seen: list[str] = []
        assert follower.stdout is not None
        while not {"a-1", "a-2"} <= {line.split(" ", 1)[0] for line in seen}:
            line = follower.stdout.readline()
            assert line, f"logs -f ended early: {seen} {follower.stderr.read() if follower.stderr else ''}"
            seen.append(line)
        assert follower.poll() is None, "both streams are open: it waits for more"
        swarm.stop_thread()  # no supervisor to start them again
        for name in ("a-1", "a-2"):
            swarm.supervisor.runtime.remove(name)
        assert follower.wait(30) == 0, "it ends once every agent it follows has stopped"
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
