"""``kswarm agent ...`` on a machine that does not share the orchestrator's home: the commands go
through ``/api/swarm`` and the control stream, and say the same things as the local ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from swarm_kit import report, running, supervised_swarm
from typer.testing import CliRunner

from kstest.gateway import GatewayThread
from kstest.waiting import wait_for
from orchestrator.cli.main import app

pytestmark = pytest.mark.slow


def test_agent_commands_without_the_home_use_the_gateway(gateway: GatewayThread, tmp_path: Path) -> None:
    runner = CliRunner()
    elsewhere = tmp_path / "laptop"  # no swarm/swarm.json here: the orchestrator's home is not shared

    def kswarm(*argv: str) -> tuple[int, str, str]:
        env = {
            "KSWARM_URL": gateway.url,
            "KSWARM_TOKEN": gateway.operator_token,
            "KSWARM_HOME": str(elsewhere),
        }
        result = runner.invoke(app, ["agent", *argv], env=env)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception  # a traceback is a bug
        return result.exit_code, result.stdout, result.stderr

    with supervised_swarm(gateway, "  - name: dev-1\n"):
        wait_for(lambda: running(gateway, "dev-1"), 60, "dev-1 running")
        code, out, _ = kswarm("memory", "show", "dev-1")
        assert code == 0 and out.startswith("# Memory of dev-1") and "-- snapshots --" in out
        code, out, _ = kswarm("memory", "show", "dev-1", "--json")  # the same answer as the local one
        shown = json.loads(out)
        assert code == 0 and shown["agent"] == "dev-1" and shown["memory_md"].startswith("# Memory of dev-1")
        code, out, _ = kswarm("restart", "dev-1")
        assert code == 0 and out.startswith("restarted dev-1 (")
        assert report(gateway).agents[0].restarts == 1
        code, snap, _ = kswarm("memory", "snapshot", "dev-1", "--label", "cli")
        assert code == 0 and snap.strip().endswith("-cli") and " " not in snap.strip()
        code, _, err = kswarm("memory", "snapshot", "dev-1", "--label", "../x")
        assert code == 2 and err.startswith("error: bad label")
        code, out, _ = kswarm("memory", "rollback", "dev-1", "--to", snap.strip(), "--no-restart")
        assert code == 0 and "rolled back to" in out and "restarting" not in out
        code, out, _ = kswarm("quarantine", "dev-1")
        assert code == 0 and "quarantined dev-1" in out and "token(s) revoked" in out
        code, _, err = kswarm("restart", "dev-1")
        assert code == 1 and "release it first" in err and len(err.strip().splitlines()) == 1
        code, out, _ = kswarm("release", "dev-1")
        assert code == 0 and "released dev-1" in out
        wait_for(lambda: running(gateway, "dev-1"), 60, "dev-1 running again")
        code, _, err = kswarm("restart", "ghost")
        assert code == 1 and "not an agent of swarm" in err
