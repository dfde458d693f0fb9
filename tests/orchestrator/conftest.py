"""Fixtures of the orchestrator suites: both runtime backends, and swarms that clean up after themselves."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kstest.gateway import GatewayProcess
from kstest.orchestrator import SwarmUnderTest, docker_available, make_spec
from orchestrator.spec import SwarmSpec


@pytest.fixture(scope="session")
def docker_daemon() -> str:
    ok, why = docker_available()
    if not ok:
        pytest.skip(f"Docker backend not tested: {why}")
    return "docker"


@pytest.fixture(params=["process", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "docker":
        request.getfixturevalue("docker_daemon")
    return request.param


@pytest.fixture
def swarm_factory(
    gateway: GatewayProcess, short_tmp: Path, backend: str
) -> Iterator[Callable[..., SwarmUnderTest]]:
    made: list[SwarmUnderTest] = []

    def make(
        agents_yaml: str = "  - pattern: a-{i}\n    count: 2\n",
        extra: str = "",
        start: bool = True,
        **lifecycle: float,
    ) -> SwarmUnderTest:
        spec: SwarmSpec = make_spec(agents_yaml, extra, **lifecycle)
        runtime_backend = backend
        if backend == "userns":  # the process backend with its namespace sandbox (as root: plus a uid)
            runtime_backend = "process"
            sandboxed = spec.process.model_copy(update={"isolation": "userns"})
            spec = spec.model_copy(update={"process": sandboxed})
        swarm = SwarmUnderTest(gateway, short_tmp / "kshome", spec, runtime_backend)
        made.append(swarm)
        if start:
            swarm.start_thread()
        return swarm

    yield make
    for swarm in made:
        swarm.close()
