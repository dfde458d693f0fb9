"""compose.yaml for real: the images built from this checkout (``kswarm images build``, from the
host-shared debootstrapped base), the embedded-forge profile brought up with the real Docker daemon,
a scripted agent's pull request verified by the compose worker and merged by the gate; then
``docker compose down -v`` leaves no container, volume or network of the deployment or its swarm.

Everything listens on loopback or unix sockets: the compose services use the host's network (bound to
127.0.0.1, a free port) or none, and the daemon of the tests has no bridge at all.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest
from test_compose_config import compose_command

from kstest.orchestrator import REPO

pytestmark = [pytest.mark.docker, pytest.mark.slow]
SECRET_DIRS = ("model_key", "operator_token", "worker_token_cpu", "gitea_admin_token")
MERGE_TIMEOUT_S = 900
HEALTHY_TIMEOUT_S = 120
LONG_RUNNING = {"redis", "gateway", "orchestrator", "worker-cpu"}


@pytest.fixture(scope="module")
def built_images(docker_daemon: str) -> list[str]:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "kswarm"), "images", "build", "--json"],
        capture_output=True,
        text=True,
        timeout=3600,
        cwd=REPO,
    )
    assert done.returncode == 0, f"kswarm images build failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return list(json.loads(done.stdout)["built"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def of_project(client: docker.DockerClient, project: str) -> dict[str, list[str]]:
    label = {"label": f"com.docker.compose.project={project}"}
    return {
        "containers": [c.name for c in client.containers.list(all=True, filters=label)],
        "volumes": [v.name for v in client.volumes.list(filters=label)],
        "networks": [n.name for n in client.networks.list(filters=label)],
    }


def of_swarm(client: docker.DockerClient, swarm: str) -> dict[str, list[str]]:
    label = {"label": f"kswarm.swarm={swarm}"}
    return {
        "containers": [c.name for c in client.containers.list(all=True, filters=label)],
        "volumes": [v.name for v in client.volumes.list(filters=label)],
    }


def logs_of(client: docker.DockerClient, project: str) -> str:
    out = []
    for c in client.containers.list(all=True, filters={"label": f"com.docker.compose.project={project}"}):
        tail = c.logs(tail=40).decode(errors="replace")
        out.append(f"--- {c.name} ({c.status}) ---\n{tail}")
    return "\n".join(out)


def health_of(client: docker.DockerClient, project: str) -> dict[str, str]:
    out = {}
    for c in client.containers.list(all=True, filters={"label": f"com.docker.compose.project={project}"}):
        health = c.attrs["State"].get("Health") or {}
        out[c.labels["com.docker.compose.service"]] = str(health.get("Status", "none"))
    return out


def wait_healthy(client: docker.DockerClient, project: str, services: set[str]) -> None:
    """Every long-running service's own healthcheck passes (the worker's: it holds its pool's node)."""
    deadline = time.monotonic() + HEALTHY_TIMEOUT_S
    while True:
        states = health_of(client, project)
        if all(states.get(name) == "healthy" for name in services):
            return
        assert time.monotonic() < deadline, f"not healthy: {states}\n" + logs_of(client, project)
        time.sleep(2)


def kickoff_merged(client: docker.DockerClient, project: str) -> str | None:
    for c in client.containers.list(all=True, filters={"label": "com.docker.compose.service=kickoff"}):
        if c.labels.get("com.docker.compose.project") != project:
            continue
        text = c.logs().decode(errors="replace")
        merged = [line for line in text.splitlines() if "merged into kswarm/dataset" in line]
        if merged:
            return merged[0]
    return None


def test_compose_up_verifies_and_merges_a_pr_and_down_leaves_nothing(
    built_images: list[str], tmp_path: Path
) -> None:
    command = compose_command()
    if command is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed")
    client = docker.from_env()
    project = f"kswarmtest{os.getpid()}"
    secrets = tmp_path / "secrets"
    for name in SECRET_DIRS:
        (secrets / name).mkdir(parents=True)
    model_key = f"sk-ant-compose-test-{os.urandom(8).hex()}"
    (secrets / "model_key" / "model_key").write_text(model_key + "\n")
    port = free_port()
    env = {
        **os.environ,
        "COMPOSE_PROJECT_NAME": project,
        "KSWARM_PORT": str(port),
        "KSWARM_SECRETS_DIR": str(secrets),
        "KSWARM_KICKOFF_TASKS": "add",
        # The orchestrator starts the agents on this daemon (the tests' private one).
        "KSWARM_DOCKER_SOCKET": os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock").removeprefix(
            "unix://"
        ),
    }
    compose = [*command, "-f", str(REPO / "compose.yaml"), "--profile", "embedded-forge"]
    assert of_swarm(client, "kswarm")["containers"] == [], "another kswarm swarm runs on this daemon"
    up = subprocess.run(
        [*compose, "up", "-d"], capture_output=True, text=True, env=env, cwd=REPO, timeout=900
    )
    try:
        assert up.returncode == 0, up.stderr[-4000:]
        assert of_project(client, project)["networks"] == []  # no network of Docker's, ever
        deadline = time.monotonic() + MERGE_TIMEOUT_S
        merged = None
        while merged is None:
            assert time.monotonic() < deadline, "no merge in time:\n" + logs_of(client, project)
            merged = kickoff_merged(client, project)
            time.sleep(3)
        assert "verified and reviewed" in merged

        token = (secrets / "operator_token" / "operator_token").read_text().strip()
        assert token.startswith("ksw_")
        api = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"})
        pulls: list[dict[str, Any]] = api.get(
            "/api/forge/pulls", params={"repo": "kswarm/dataset", "state": "all"}
        ).json()
        done = [p for p in pulls if p["state"] == "merged"]
        assert done and done[0]["author"] == "dev-1", pulls
        jobs = api.get("/api/jobs", params={"limit": 50}).json()
        verified = [j for j in jobs if j.get("state") == "succeeded" and j.get("pool") == "cpu"]
        assert verified, jobs
        health = httpx.get(f"http://127.0.0.1:{port}/healthz")
        assert health.status_code == 200, health.text
        wait_healthy(client, project, LONG_RUNNING)

        # No token and no key in any container's configuration (`docker inspect` shows no secret).
        worker_token = (secrets / "worker_token_cpu" / "worker_token").read_text().strip()
        containers = client.containers.list(
            all=True, filters={"label": f"com.docker.compose.project={project}"}
        )
        containers += client.containers.list(all=True, filters={"label": "kswarm.swarm=kswarm"})
        for c in containers:
            config = json.dumps(c.attrs["Config"])
            assert token not in config and worker_token not in config and model_key not in config, c.name
        # The model key reached the gateway's process (from its compose secret) and no other service.
        for c in client.containers.list(filters={"label": f"com.docker.compose.project={project}"}):
            environ = c.exec_run(["cat", "/proc/1/environ"]).output.decode(errors="replace").split("\0")
            has_key = f"KSWARM_LLM_API_KEY={model_key}" in environ
            assert has_key == (c.labels["com.docker.compose.service"] == "gateway"), c.name
        assert of_swarm(client, "kswarm")["containers"], "the agents ran in containers of their own"
    finally:
        down = subprocess.run(
            [*compose, "down", "-v", "--timeout", "90"],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=600,
        )
    assert down.returncode == 0, down.stderr[-4000:]
    assert of_project(client, project) == {"containers": [], "volumes": [], "networks": []}
    assert of_swarm(client, "kswarm") == {"containers": [], "volumes": []}
