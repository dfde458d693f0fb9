"""The issue's "done when": 16 agents heartbeating on either backend; killing one heals, no duplicates."""

from __future__ import annotations

import os
import signal
import time

import pytest

from kstest.orchestrator import agent_pid, running_copies
from kstest.waiting import wait_for

NAMES = [f"dev-{i}" for i in range(1, 17)]


@pytest.mark.slow
def test_sixteen_agents_heartbeat_and_heal(swarm_factory) -> None:
    swarm = swarm_factory("  - pattern: dev-{i}\n    count: 16\n    resources: {memory: 512m}\n")
    swarm.wait_heartbeating(NAMES, timeout=90)
    victim = "dev-7"
    killed_at = time.time()
    os.kill(agent_pid(swarm, victim), signal.SIGKILL)
    wait_for(lambda: swarm.record(victim).restarts == 1, 30, "the restart")
    swarm.wait_heartbeating([victim], since=killed_at)
    # The killed tree's last processes die of their parent-death signal a moment after the launcher
    # (the restart kills any it finds first): what is waited for is one copy each, for good.
    wait_for(lambda: all(running_copies(swarm, n) == 1 for n in NAMES), 10, "one copy of each agent")
    assert sum(swarm.record(n).restarts for n in NAMES) == 1
