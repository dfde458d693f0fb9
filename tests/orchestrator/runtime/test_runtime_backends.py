"""One suite, every runtime: isolation by attack, secrets, restarts, adoption, purge.

Runs against the process backend (a uid per agent as root), the process backend in its namespace
sandbox (``process.isolation: userns``) and the Docker backend."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import docker
import httpx
import pytest
import yaml

from kstest.orchestrator import SwarmUnderTest, agent_pid, proc_stat, running_copies
from kstest.waiting import wait_for
from orchestrator.runtime.process import proc_env
from orchestrator.supervisor.main import quarantine, release, stop_swarm
from orchestrator.swarm_dir.uid_ranges import process_owners


@pytest.fixture(params=["process", "userns", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "docker":
        request.getfixturevalue("docker_daemon")
    return request.param


SLEEPER = '  - name: s-1\n    runtime: {command: ["python", "-c", "import time; time.sleep(600)"]}\n'
CRASHER = '  - name: c-1\n    runtime: {command: ["python", "-c", "import sys; sys.exit(3)"]}\n'


def own_memory(swarm: SwarmUnderTest, name: str) -> str:
    return str(swarm.layout.agent_dir(name, "memory")) if swarm.backend == "process" else "/kswarm/memory"


def test_agents_heartbeat_with_their_identity(swarm_factory) -> None:
    swarm = swarm_factory()
    swarm.wait_heartbeating(["a-1", "a-2"])
    agents = {a["name"]: a for a in swarm.client.agents()}
    assert agents["a-1"]["email"] == f"a-1@agents.{swarm.spec.swarm}"
    out = swarm.supervisor.runtime.exec(
        "a-1", ["sh", "-c", f"head -1 {own_memory(swarm, 'a-1')}/MEMORY.md; git config user.email"]
    )
    assert "# Memory of a-1" in out.output and f"a-1@agents.{swarm.spec.swarm}" in out.output


def test_agent_cannot_read_or_write_another_agents_files(swarm_factory) -> None:
    swarm = swarm_factory()
    swarm.wait_heartbeating(["a-1", "a-2"])
    runtime = swarm.supervisor.runtime
    b_mem = swarm.layout.agent_dir("a-2", "memory")
    b_work = swarm.layout.agent_dir("a-2", "work")
    attacks = [
        f"cat {b_mem}/MEMORY.md",
        f"ls {b_mem}",
        f"echo pwned > {b_mem}/MEMORY.md",
        f"touch {b_work}/pwned",
        f"cat {swarm.layout.token_file('a-2')}",
        f"cat {swarm.home}/operator.token",
    ]
    (swarm.home / "operator.token").write_text("ksw_operator_secret\n")
    (swarm.home / "operator.token").chmod(0o600)
    for attack in attacks:
        result = runtime.exec("a-1", ["sh", "-c", attack])
        assert result.returncode != 0, f"attack succeeded: {attack!r}: {result.output}"
        assert "ksw_" not in result.output
    assert not (b_work / "pwned").exists()
    assert (b_mem / "MEMORY.md").read_text().startswith("# Memory of a-2")
    # ... while its own memory is readable and writable.
    mine = runtime.exec("a-1", ["sh", "-c", f"echo note >> {own_memory(swarm, 'a-1')}/notes.md && echo ok"])
    assert mine.returncode == 0 and "ok" in mine.output


def test_operator_secrets_are_not_in_the_agent_environment(swarm_factory, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-operator-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-operator-secret")
    swarm = swarm_factory("  - name: a-1\n    runtime: {env: {KSWARM_EXTRA: visible}}\n")
    swarm.wait_heartbeating(["a-1"])
    out = swarm.supervisor.runtime.exec("a-1", ["sh", "-c", "env"]).output
    assert "KSWARM_EXTRA=visible" in out
    assert "operator-secret" not in out and "ANTHROPIC_API_KEY" not in out
    # The agent's own process, not only an exec beside it.
    pid = agent_pid(swarm, "a-1")
    env = open(f"/proc/{pid}/environ", "rb").read().decode()
    assert "operator-secret" not in env and "KSWARM_AGENT=a-1" in env


def test_kill_9_restarts_the_agent_with_memory_intact(swarm_factory) -> None:
    swarm = swarm_factory("  - name: a-1\n")
    swarm.wait_heartbeating(["a-1"])
    runtime = swarm.supervisor.runtime
    assert (
        runtime.exec(
            "a-1", ["sh", "-c", f"echo remember-42 >> {own_memory(swarm, 'a-1')}/notes.md"]
        ).returncode
        == 0
    )
    old_pid = agent_pid(swarm, "a-1")
    killed_at = time.time()
    os.kill(old_pid, signal.SIGKILL)
    wait_for(lambda: swarm.record("a-1").restarts >= 1 and runtime.status("a-1").running, 20, "a restart")
    swarm.wait_heartbeating(["a-1"], since=killed_at)
    assert agent_pid(swarm, "a-1") != old_pid
    assert "remember-42" in (swarm.layout.agent_dir("a-1", "memory") / "notes.md").read_text()
    # The killed tree's last processes die of their parent-death signal, a moment after the launcher.
    wait_for(lambda: running_copies(swarm, "a-1") == 1, 10, "one copy of a-1")


# An agent that leaves a child of its own behind: a new session, no parent-death signal.
DETACHER = (
    "  - name: d-1\n    runtime: {command: [python, -c, "
    "\"import subprocess, time; subprocess.Popen(['sleep', '600'], start_new_session=True); "
    'time.sleep(600)"]}\n'
)


def _sleepers_of(name: str) -> set[int]:
    found = set()
    for pid, _owner in process_owners():
        try:
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if argv0.endswith(b"sleep") and proc_env(pid).get("KSWARM_AGENT") == name:
            found.add(pid)
    return found


def test_what_a_killed_agent_left_behind_does_not_outlive_its_restart(swarm_factory) -> None:
    swarm = swarm_factory(DETACHER)
    first = wait_for(lambda: _sleepers_of("d-1"), 30, "the agent's detached child")
    os.kill(agent_pid(swarm, "d-1"), signal.SIGKILL)
    wait_for(lambda: swarm.record("d-1").restarts >= 1, 30, "the restart")
    wait_for(lambda: _sleepers_of("d-1") - first, 30, "the new instance's child")
    wait_for(lambda: not (_sleepers_of("d-1") & first), 10, "the old instance's child gone")


def test_orchestrator_restart_adopts_running_agents(swarm_factory, short_tmp: Path) -> None:
    swarm = swarm_factory(start=False)
    spec_path = short_tmp / "swarm.yaml"
    spec_path.write_text(yaml.safe_dump(swarm.spec.model_dump(mode="json", exclude={"source"})))
    swarm.start_subprocess(spec_path)
    swarm.wait_heartbeating(["a-1", "a-2"])
    swarm.supervisor = swarm.make_supervisor()  # for status lookups only; never run
    before = {n: agent_pid(swarm, n) for n in ("a-1", "a-2")}
    swarm.proc.send_signal(signal.SIGKILL)
    swarm.proc.wait(10)
    swarm.start_subprocess(spec_path)  # a new orchestrator on the same home
    time.sleep(2.5)  # > 10 reconcile passes
    assert swarm.proc.poll() is None, (swarm.home / "supervisor.log").read_text()
    for name in ("a-1", "a-2"):
        assert agent_pid(swarm, name) == before[name], f"{name} was restarted instead of adopted"
        assert running_copies(swarm, name) == 1
        assert swarm.record(name).restarts == 0
    swarm.wait_heartbeating(["a-1", "a-2"], since=time.time())


def test_a_second_orchestrator_on_the_same_home_refuses(swarm_factory) -> None:
    swarm = swarm_factory()
    swarm.wait_heartbeating(["a-1", "a-2"])
    with pytest.raises(RuntimeError, match="already supervises"):
        swarm.make_supervisor().run(__import__("threading").Event())


def test_crashing_agent_backs_off_into_crash_loop(swarm_factory) -> None:
    swarm = swarm_factory(CRASHER)
    rec = wait_for(lambda: (r := swarm.record("c-1")).state == "crash-loop" and r, 30, "crash-loop state")
    assert rec.last_exit == 3
    assert rec.restarts >= 2
    assert rec.next_start_at is not None
    assert any("c-1 is in a crash loop" in t for t in swarm.ops_texts())


def test_silent_agent_is_marked_stalled_and_announced(swarm_factory) -> None:
    swarm = swarm_factory(SLEEPER, stall_after_s=1.0)
    wait_for(lambda: swarm.record("s-1").state == "stalled", 20, "stalled state")
    assert any("s-1 is stalled" in t for t in swarm.ops_texts())
    assert swarm.record("s-1").restarts == 0  # stalled is reported, not killed


def test_quarantine_stops_revokes_and_keeps_files_then_release(swarm_factory) -> None:
    swarm = swarm_factory("  - name: a-1\n")
    swarm.wait_heartbeating(["a-1"])
    runtime = swarm.supervisor.runtime
    old_token = swarm.layout.token_file("a-1").read_text().strip()
    assert quarantine(swarm.layout, runtime, swarm.client, "a-1") >= 1
    wait_for(lambda: swarm.record("a-1").state == "quarantined", 10, "quarantined state")
    time.sleep(0.6)  # several passes: it must stay down
    assert not runtime.status("a-1").running
    assert (
        httpx.get(f"{swarm.gateway.url}/api/me", headers={"Authorization": f"Bearer {old_token}"}).status_code
        == 401
    )
    assert (swarm.layout.agent_dir("a-1", "memory") / "MEMORY.md").exists()
    released_at = time.time()
    release(swarm.layout, swarm.client, "a-1")
    swarm.wait_heartbeating(["a-1"], since=released_at)
    assert swarm.layout.token_file("a-1").read_text().strip() != old_token


def test_down_purge_leaves_no_process_container_or_volume(swarm_factory) -> None:
    swarm = swarm_factory()
    swarm.wait_heartbeating(["a-1", "a-2"])
    swarm.stop_thread()
    uids = [swarm.record(n).uid for n in ("a-1", "a-2")]
    stop_swarm(swarm.layout, swarm.supervisor.runtime, purge=True)
    for name in ("a-1", "a-2"):
        assert running_copies(swarm, name) == 0
        assert not swarm.layout.agent_data(name).exists()
    if swarm.backend == "docker":
        client = docker.from_env()
        label = f"kswarm.swarm={swarm.spec.swarm}"
        assert client.containers.list(all=True, filters={"label": label}) == []
        assert client.volumes.list(filters={"label": label}) == []
    else:
        # Live processes: a zombie (bubblewrap's init, orphaned when its monitor exits first) runs
        # nothing and waits for the host's init here, the orchestrator being a test's thread; where the
        # orchestrator is a process, it reaps them itself (orchestrator/supervisor/orphans.py,
        # test_orphans.py).
        owned = [
            p
            for p in Path("/proc").iterdir()
            if p.name.isdigit() and _uid_of(p) in uids and not proc_stat(p).startswith("Z")
        ]
        assert [(p, proc_stat(p)) for p in owned] == []


def _uid_of(path: Path) -> int | None:
    try:
        return path.stat().st_uid
    except OSError:
        return None
