"""compose.yaml (the production shape) passes `docker compose config` / `docker-compose config`, and says
what a deployment needs: secrets as files (no token in any environment, no empty default), a
healthcheck on every service, a volume for every piece of state, no network of Docker's."""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from kstest.orchestrator import REPO

LONG_RUNNING = {"redis", "gateway", "orchestrator", "worker-cpu"}


def compose_command() -> list[str] | None:
    if (
        shutil.which("docker")
        and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
    ):
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def active(services: dict[str, Any], profile: str) -> dict[str, Any]:
    """The services ``--profile profile up`` starts (those without profiles, and the profile's)."""
    return {n: s for n, s in services.items() if not s.get("profiles") or profile in s["profiles"]}


def compose_config(*profiles: str) -> dict[str, Any]:
    command = compose_command()
    if command is None:
        pytest.skip(
            "neither `docker compose` nor `docker-compose` is installed (apt-get install docker-compose)"
        )
    flags = [arg for p in profiles for arg in ("--profile", p)]
    done = subprocess.run(
        [*command, "-f", str(REPO / "compose.yaml"), *flags, "config"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def test_compose_config_is_valid_in_both_forge_profiles() -> None:
    embedded = active(compose_config("embedded-forge")["services"], "embedded-forge")
    assert LONG_RUNNING | {"init", "kickoff"} <= set(embedded) and "gitea" not in embedded
    gitea = active(compose_config("gitea")["services"], "gitea")
    assert {"gitea", "gateway-gitea"} <= set(gitea) and "gateway" not in gitea
    assert "--appendonly" in embedded["redis"]["command"]
    assert any("docker.sock" in str(v) for v in embedded["orchestrator"]["volumes"])


def test_every_service_has_a_healthcheck_and_no_docker_network() -> None:
    for profile in ("embedded-forge", "gitea"):
        services = active(compose_config(profile)["services"], profile)
        for name, service in services.items():
            assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
            # Never a bridge network: the host's (bound to loopback) or none.
            assert service.get("network_mode") in ("host", "none"), name
    services = compose_config("embedded-forge")["services"]
    for name in ("gateway", "orchestrator", "worker-cpu", "kickoff"):
        assert "/healthz" in (REPO / "infra" / "compose" / "kswarm_compose.py").read_text()
        assert services[name]["healthcheck"]["test"][-2:][0] == "health", name
    assert services["redis"]["network_mode"] == "none" and services["init"]["network_mode"] == "none"


def test_tokens_and_the_model_key_are_secrets_never_environment() -> None:
    config = compose_config("embedded-forge")
    services = config["services"]
    assert set(config["secrets"]) >= {"model_key", "operator_token", "worker_token_cpu"}
    wanted = {"gateway": "model_key", "orchestrator": "operator_token", "worker-cpu": "worker_token_cpu"}
    for name, secret in wanted.items():
        names = [s if isinstance(s, str) else s["source"] for s in services[name].get("secrets", [])]
        assert secret in names, (name, names)
    for name, service in services.items():
        env = service.get("environment") or {}
        for key, value in env.items():
            assert not re.search(r"(TOKEN|API_KEY|PASSWORD)$", key), (name, key)  # files only
            assert value not in ("", None), f"{name}: {key} has an empty default"
    assert "model_key" not in str(services["worker-cpu"]) and "operator_token" not in str(
        services["worker-cpu"]
    )


def test_every_piece_of_state_is_in_a_volume() -> None:
    config = compose_config("embedded-forge", "gitea")
    services = config["services"]

    def mounted(name: str) -> dict[str, str]:
        out = {}
        for volume in services[name].get("volumes", []):
            source, target = (
                volume.split(":")[:2] if isinstance(volume, str) else (volume["source"], volume["target"])
            )
            out[target] = source
        return out

    assert mounted("redis")["/data"] == "redis-data"
    assert mounted("gateway")["/var/lib/kswarm"] == "gateway-home"
    assert mounted("orchestrator")["/var/lib/kswarm"] == "orchestrator-home"
    assert mounted("worker-cpu")["/var/lib/kswarm-jobs"] == "worker-jobs"
    assert mounted("kickoff")["/var/lib/kswarm-state"] == "kickoff-state"
    assert mounted("gitea")["/data"] == "gitea-data"
    assert {"redis-data", "gateway-home", "orchestrator-home", "worker-jobs", "gitea-data"} <= set(
        config["volumes"]
    )


def test_agent_dockerfile_runs_the_agent_entry_point_as_non_root() -> None:
    text = (REPO / "infra" / "agent.Dockerfile").read_text()
    assert 'CMD ["python", "-m", "agents"]' in text
    user = [line for line in text.splitlines() if line.startswith("USER ")]
    assert user and not user[-1].split()[1].startswith("0")


def test_the_gpu_worker_is_based_on_the_vendors_cuda_image() -> None:
    text = (REPO / "infra" / "worker-cuda.Dockerfile").read_text()
    assert re.search(r"^ARG CUDA_BASE=nvidia/cuda:\S+", text, re.M) and "FROM ${CUDA_BASE}" in text


def test_attack_no_secret_file_under_the_repos_secrets_dir_can_be_committed() -> None:
    """A token written by init into this checkout (the default secrets dir) must never be picked up by
    ``git add -A``: not the known ones, not the dir init makes for a pool of your own spec, not the
    round-3 layout's ``worker_token/worker-cpu`` left on disk."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    for path in (
        "operator_token/operator_token",
        "model_key/model_key",
        "gitea_admin_token/gitea_admin_token",
        "worker_token_cpu/worker_token",
        "worker_token_gpu/worker_token",
        "worker_token/worker-cpu",
    ):
        done = subprocess.run(
            ["git", "check-ignore", "-q", f"infra/compose/secrets/{path}"], cwd=REPO, capture_output=True
        )
        assert done.returncode == 0, f"infra/compose/secrets/{path} is not ignored by git"
