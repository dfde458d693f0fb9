"""``kswarm up -f`` (embedded Redis, gateway and supervisor in one process) finds the seam by itself:
the supervisor publishes to the embedded Redis the gateway uses, and takes requests from it."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from gateway.swarm.models import SwarmReport
from kstest.cli import Up, kswarm
from kstest.gateway import free_port
from kstest.waiting import wait_for

pytestmark = pytest.mark.slow


def test_kswarm_up_publishes_its_swarm_and_takes_requests(short_tmp: Path) -> None:
    home = short_tmp / "home"
    spec = short_tmp / "swarm.yaml"
    spec.write_text(
        "swarm: upseam\ndefaults: {runtime: {heartbeat_s: 1}}\nagents:\n  - name: dev-1\n"
        "lifecycle: {reconcile_s: 0.2, backoff_base_s: 0.2, backoff_max_s: 1.0}\n"
    )
    up = Up(home, free_port(), "-f", str(spec), "--backend", "process")
    try:
        up.wait_ready()
        token = (home / "operator.token").read_text().strip()
        with httpx.Client(base_url=up.url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as op:

            def swarm() -> SwarmReport:
                return SwarmReport.model_validate(op.get("/api/swarm").json())

            wait_for(lambda: (s := swarm()).supervising and s.agents and s.agents[0].running, 60, "dev-1 up")
            assert swarm().status is not None and swarm().status.swarm == "upseam"
            done = op.post("/api/swarm/agents/dev-1/restart")
            assert done.status_code == 200, done.text
            wait_for(lambda: (a := swarm().agents[0]).restarts == 1 and a.running, 30, "dev-1 restarted")
    finally:
        down = kswarm(home, "down", "--purge")
        up.stop()
    assert down.returncode == 0, down.stderr
