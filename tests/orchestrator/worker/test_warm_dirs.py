"""The start-up sweep of a work dir shared by workers: an idle warm sandbox's dir (which no job
touches for as long as none comes) stays while its worker runs, and goes once that worker is gone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.worker.warm import WARM_PREFIX
from orchestrator.worker.worker import Worker


def test_the_sweep_keeps_a_live_workers_idle_warm_dir_and_removes_a_dead_ones(tmp_path: Path) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(gone.stdout)  # exited: a worker killed with its warm sandbox
    live = tmp_path / f"{WARM_PREFIX}{os.getpid()}-aaaaaaaaaaaa"
    dead = tmp_path / f"{WARM_PREFIX}{dead_pid}-bbbbbbbbbbbb"
    stale_job = tmp_path / "j0123-1"
    for path in (live, dead, stale_job):
        (path / "out").mkdir(parents=True)
    week_ago = time.time() - 7 * 86400
    for path in (live, dead, stale_job):
        os.utime(path, (week_ago, week_ago))  # all of them untouched for a week
    Worker("cpu", "http://127.0.0.1:1", "token", workdir=tmp_path)._sweep()
    assert live.exists()
    assert not dead.exists() and not stale_job.exists()
