"""Fixtures of the task-board suites: one real gateway per module with the forge and the board."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_sync
from boardkit import BoardGateway

from gateway.tasks.models import TasksSettings


@pytest.fixture(scope="module")
def board_gw(redis_url: str) -> Iterator[BoardGateway]:
    """One gateway per module on a flushed Redis; agents a1..a8, a worker, short leases (2 s)."""
    client = redis_sync.Redis.from_url(redis_url)
    client.flushall()
    client.close()
    tmp = Path(tempfile.mkdtemp(prefix="kstb"))
    gw = BoardGateway(tmp / "home", redis_url)
    # The board's mechanics; the rule that task_done needs a merged PR has its own tests
    # (test_taskboard_rules.py), here every agent's done is taken at its word.
    gw.tasks_settings = TasksSettings(
        claim_ttl_s=2.0, sweep_s=0.2, heartbeat_fresh_s=1.5, done_needs_merged_pr=False
    )
    gw.start()
    gw.tokens = {f"a{i}": gw.add_principal(f"a{i}") for i in range(1, 9)}
    gw.tokens["worker1"] = gw.add_principal("worker1", "worker")
    try:
        yield gw
    finally:
        gw.stop()
        shutil.rmtree(tmp, ignore_errors=True)
