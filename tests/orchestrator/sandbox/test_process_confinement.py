"""Process backend only: rlimits, a private /tmp, a uid per agent, no way to the operator's Redis."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kstest.waiting import wait_for
from orchestrator.runtime.launch import plan_hides

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="uid isolation needs root")

LIMITED = (
    "  - pattern: a-{i}\n    count: 2\n"
    "    resources: {memory: 1g, pids: 64, cpu_time_s: 3600, disk_files: 512}\n"
)


@pytest.fixture
def backend() -> str:
    return "process"


def limits_of(pid: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines()[1:]:
        name = line[:26].strip()
        out[name] = line[26:47].strip()
    return out


def test_agent_runs_with_its_own_uid_and_rlimits(swarm_factory) -> None:
    swarm = swarm_factory(LIMITED)
    swarm.wait_heartbeating(["a-1", "a-2"])
    pids = {n: int(swarm.supervisor.runtime.status(n).ref) for n in ("a-1", "a-2")}
    uids = {n: Path(f"/proc/{p}").stat().st_uid for n, p in pids.items()}
    assert uids["a-1"] != uids["a-2"] and min(uids.values()) >= 20000
    limits = limits_of(pids["a-1"])
    assert limits["Max address space"] == str(1024**3)
    assert limits["Max processes"] == "64"
    assert limits["Max cpu time"] == "3600"
    assert limits["Max open files"] == "512"
    assert limits["Max file size"] == str(1024**3)  # resources.disk's default
    assert limits["Max core file size"] == "0"
    data = swarm.layout.agent_data("a-1")
    assert data.stat().st_uid == uids["a-1"] and (data.stat().st_mode & 0o777) == 0o700


def test_tmp_is_private_to_each_agent(swarm_factory) -> None:
    swarm = swarm_factory()
    swarm.wait_heartbeating(["a-1", "a-2"])
    runtime = swarm.supervisor.runtime
    assert (
        runtime.exec("a-1", ["sh", "-c", "echo secret > /tmp/drop && cat /tmp/drop"]).output.strip()
        == "secret"
    )
    assert not Path("/tmp/drop").exists()
    assert runtime.exec("a-2", ["sh", "-c", "cat /tmp/drop"]).returncode != 0
    # The drop is still there for a-1 (its exec joins the agent's own mount namespace).
    assert runtime.exec("a-1", ["cat", "/tmp/drop"]).output.strip() == "secret"


def test_agent_cannot_reach_redis_or_the_orchestrator_state(swarm_factory, redis_url: str) -> None:
    swarm = swarm_factory("  - name: a-1\n")
    swarm.wait_heartbeating(["a-1"])
    runtime = swarm.supervisor.runtime
    sock = redis_url.removeprefix("unix://").split("?")[0]
    code = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({sock!r}); print('CONNECTED')"
    result = runtime.exec("a-1", [sys.executable, "-c", code])
    assert "CONNECTED" not in result.output
    root = swarm.layout.root
    for attack in [f"ls {root}", f"ls {root}/data", f"ls {root}/agents", f"cat {root}/uids.json"]:
        result = runtime.exec("a-1", ["sh", "-c", attack])
        assert result.returncode != 0, f"{attack}: {result.output}"


def test_agent_cannot_read_other_processes_command_lines(swarm_factory) -> None:
    """A worker started with ``--token`` (or another agent with its arguments) shows them in
    /proc/<pid>/cmdline to every uid on the host; an agent's /proc shows only its own processes."""
    code = "import time; time.sleep(300)"
    secret = subprocess.Popen([sys.executable, "-c", code, "--token", "ksw_secret_on_a_command_line"])
    try:
        swarm = swarm_factory()
        swarm.wait_heartbeating(["a-1", "a-2"])
        runtime = swarm.supervisor.runtime
        assert secret.poll() is None
        result = runtime.exec("a-1", ["sh", "-c", f"cat /proc/{secret.pid}/cmdline; cat /proc/*/cmdline"])
        assert "ksw_secret" not in result.output
        other = int(runtime.status("a-2").ref)
        assert runtime.exec("a-1", ["sh", "-c", f"ls /proc/{other}"]).returncode != 0
        assert runtime.exec("a-1", ["sh", "-c", "cat /proc/self/cmdline"]).returncode == 0
    finally:
        secret.kill()
        secret.wait()


def test_a_stray_child_of_the_agent_dies_with_it(swarm_factory) -> None:
    swarm = swarm_factory("  - name: a-1\n")
    swarm.wait_heartbeating(["a-1"])
    runtime = swarm.supervisor.runtime
    # A double-forked, setsid'd child escapes the process group; the uid still catches it.
    runtime.exec("a-1", ["sh", "-c", "setsid sleep 300 >/dev/null 2>&1 < /dev/null &"])
    uid = swarm.record("a-1").uid
    wait_for(lambda: len(_pids_of(uid)) >= 2, 10, "the stray child")
    swarm.stop_thread()
    runtime.stop("a-1")
    wait_for(lambda: _pids_of(uid) == [], 10, "no process of the agent's uid")


def _pids_of(uid: int | None) -> list[int]:
    from orchestrator.runtime.process import pids_of_uid

    assert uid is not None
    return pids_of_uid(uid)


def test_plan_hides_covers_untraversable_ancestors(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    (locked / "keep" / "deep").mkdir(parents=True)
    (locked / "other").mkdir()
    locked.chmod(0o700)
    hides = plan_hides([locked / "keep" / "deep"], uid=23456)
    assert hides[locked] == {"keep"}
    assert Path("/tmp") in hides  # always private


def test_two_swarms_never_share_agent_uids(gateway, short_tmp: Path) -> None:
    """Default: a uid block per home. Pinned to the same uid_base, the second swarm refuses to start
    its agent (stopping one would otherwise kill the other's processes)."""
    from kstest.orchestrator import SwarmUnderTest, make_spec

    def swarm(name: str, home: str, extra: str = "") -> SwarmUnderTest:
        sleeper = (
            f'  - name: {name}\n    runtime: {{command: ["python", "-c", "import time; time.sleep(600)"]}}\n'
        )
        made = SwarmUnderTest(gateway, short_tmp / home, make_spec(sleeper, extra), "process")
        made.start_thread()
        return made

    first, second = swarm("x-1", "h1"), swarm("y-1", "h2")
    try:
        wait_for(lambda: first.record("x-1").state == "running", 20, "x-1 running")
        wait_for(lambda: second.record("y-1").state == "running", 20, "y-1 running")
        assert abs(first.record("x-1").uid - second.record("y-1").uid) >= 1000
    finally:
        first.close()
        second.close()

    pinned = "process: {uid_base: 31000}\n"
    first = swarm("x-2", "h3", pinned)
    second = None
    try:
        wait_for(lambda: first.record("x-2").state == "running", 20, "x-2 running")
        second = swarm("y-2", "h4", pinned)
        rec = wait_for(lambda: (r := second.record("y-2")).last_error and r, 20, "y-2 refused")
        assert "in use by pid" in rec.last_error and rec.state != "running"
        assert first.record("x-2").state == "running"  # untouched by the second swarm
    finally:
        first.close()
        if second is not None:
            second.close()
