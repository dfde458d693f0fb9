"""The process backend's own rules (the shared suite of every backend is test_runtime_backends.py)."""

from __future__ import annotations

import json
import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kstest.orchestrator import agent_pid
from kstest.waiting import wait_for
from orchestrator.runtime import process

SLEEPER = '  - name: s-1\n    runtime: {command: ["python", "-c", "import time; time.sleep(600)"]}\n'


@pytest.fixture
def backend() -> str:
    return "process"


def test_an_exiting_agent_is_seen_running_until_its_exit_status_is_known(swarm_factory, monkeypatch) -> None:
    """While a process exits, /proc/<pid>/environ already reads empty but wait() cannot yet collect its
    status: an agent judged by /proc then was "exited (status None)" -- a crash without its exit code,
    and a restart while the old instance still ran. The runtime's own child is judged by wait()."""
    swarm = swarm_factory(SLEEPER, backoff_base_s=600.0, backoff_max_s=600.0)  # no restart meanwhile
    runtime = swarm.supervisor.runtime
    wait_for(lambda: runtime.status("s-1").running, 30, "the agent's start")
    monkeypatch.setattr(process, "proc_env", lambda pid: {})  # /proc as it reads mid-exit
    assert runtime.status("s-1").running, "the agent runs: its launcher has not exited"
    os.kill(agent_pid(swarm, "s-1"), signal.SIGTERM)
    gone = wait_for(lambda: None if (s := runtime.status("s-1")).running else s, 30, "the exit")
    assert gone.exit_code is not None, "an observed exit carries its status"


def test_an_adopted_agent_is_seen_running_while_its_environ_reads_empty(swarm_factory, monkeypatch) -> None:
    """A supervisor that did not start the agent judged it by /proc/<pid>/environ, which reads empty
    while the launcher execs the agent: killed and started again at that moment, the supervisor found
    the agent "not running" and would start a second one beside it (seen in CI). The pid, its start time
    and the boot say which process it is; a record from another boot is never the agent."""
    swarm = swarm_factory(SLEEPER, backoff_base_s=600.0, backoff_max_s=600.0)
    started = swarm.supervisor.runtime
    wait_for(lambda: started.status("s-1").running, 30, "the agent's start")
    adopter = process.ProcessRuntime(started.layout, started.swarm, started.isolation)  # no child of its own
    monkeypatch.setattr(process, "proc_env", lambda pid: {})  # /proc as it reads mid-exec
    assert adopter.status("s-1").running, "the agent runs: its pid has the recorded start in this boot"
    record_path = started.layout.root / "agents" / "s-1.proc.json"
    record = json.loads(record_path.read_text())
    assert record["boot_id"] == process.boot_id()
    record_path.write_text(json.dumps({**record, "boot_id": "another-boot"}))
    assert not adopter.status("s-1").running, "a pid and start time from another boot name another process"
    legacy = {k: v for k, v in record.items() if k != "boot_id"}
    record_path.write_text(json.dumps(legacy))
    assert not adopter.status("s-1").running, "a record without a boot id needs the agent's environment"
    monkeypatch.undo()
    assert adopter.status("s-1").running
    record_path.write_text(json.dumps(record))


# Holds a launcher of an agent (KSWARM_AGENT set; an exec's launcher has none) before it sets anything up,
# while the gate file exists: the window between an agent's start and its isolation, made as long as a test
# needs (on a busy machine it lasts a Python start-up).
HOLD = """import os, time
gate = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hold")
while os.environ.get("KSWARM_AGENT") and os.path.exists(gate):
    time.sleep(0.02)
"""


def test_an_exec_while_the_agent_is_starting_runs_inside_its_isolation(
    swarm_factory, short_tmp: Path, monkeypatch
) -> None:
    """An exec that came while the agent's launcher was still starting joined the launcher's namespaces,
    the host's: it ran as the agent's uid with the host's view, where the swarm's 0700 home cannot be
    traversed (seen as a flaky "Permission denied" touching the agent's own memory). It waits for the
    agent itself now."""
    hold_dir = short_tmp / "hold-launchers"
    hold_dir.mkdir()
    (hold_dir / "sitecustomize.py").write_text(HOLD)
    gate = hold_dir / "hold"
    gate.touch()
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(hold_dir), os.environ.get("PYTHONPATH")]))
    )
    try:
        swarm = swarm_factory(SLEEPER, backoff_base_s=600.0, backoff_max_s=600.0)
        runtime = swarm.supervisor.runtime
        wait_for(lambda: runtime.status("s-1").running, 30, "the agent's launcher running")
        memory = swarm.layout.agent_dir("s-1", "memory")
        # The gate opens once the exec either ran (it did not wait) or looked for the agent a second time
        # (it waits): either way, whatever it joined, it joined while the launcher was held.
        looked, changed = [0], threading.Condition()
        real_agent_process = process.agent_process

        def counted(pid: int) -> int:
            if threading.current_thread().name.startswith("exec"):
                with changed:
                    looked[0] += 1
                    changed.notify_all()
            return real_agent_process(pid)

        def wake() -> None:
            with changed:
                changed.notify_all()

        monkeypatch.setattr(process, "agent_process", counted)
        with ThreadPoolExecutor(1, thread_name_prefix="exec") as pool:
            planted = pool.submit(runtime.exec, "s-1", ["sh", "-c", f"touch {memory}/note"])
            planted.add_done_callback(lambda _: wake())
            with changed:
                assert changed.wait_for(lambda: planted.done() or looked[0] >= 2, 60), "the exec never ran"
            gate.unlink()  # the launcher goes on
            done = planted.result(60)
    finally:
        gate.unlink(missing_ok=True)
    assert done.returncode == 0, done.output
    assert (memory / "note").exists()
