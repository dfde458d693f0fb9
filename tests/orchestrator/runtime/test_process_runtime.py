"""The process backend's own rules (the shared suite of every backend is test_runtime_backends.py)."""

from __future__ import annotations

import os
import signal

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
