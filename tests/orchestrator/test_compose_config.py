"""compose.yaml (the production shape) passes `docker compose config` / `docker-compose config`."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml
from orch_kit import REPO


def compose_command() -> list[str] | None:
    if (
        shutil.which("docker")
        and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
    ):
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_compose_config_is_valid() -> None:
    command = compose_command()
    if command is None:
        pytest.skip(
            "neither `docker compose` nor `docker-compose` is installed (apt-get install docker-compose)"
        )
    done = subprocess.run(
        [*command, "-f", str(REPO / "compose.yaml"), "config"], capture_output=True, text=True, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load(done.stdout)
    services = config["services"]
    assert {"redis", "gitea", "gateway", "orchestrator", "worker-cpu"} <= set(services)
    assert "--appendonly" in services["redis"]["command"]
    assert any("docker.sock" in str(v) for v in services["orchestrator"]["volumes"])
    # Never a bridge network: every service is on the host network (loopback) or none.
    assert all(s.get("network_mode") in ("host", "none") for s in services.values())


def test_agent_dockerfile_runs_the_agent_entry_point_as_non_root() -> None:
    text = (REPO / "infra" / "agent.Dockerfile").read_text()
    assert 'CMD ["python", "-m", "agents"]' in text
    user = [line for line in text.splitlines() if line.startswith("USER ")]
    assert user and not user[-1].split()[1].startswith("0")
