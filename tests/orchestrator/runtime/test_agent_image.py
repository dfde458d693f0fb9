"""The production agent image: ``infra/agent.Dockerfile`` builds, and a swarm runs on it (not host-shared).

The build's base, ``debian:bookworm-slim``, cannot be pulled here: ``infra/ci/agent-image.sh`` debootstraps
it from the Debian mirror once, then runs the real ``docker build`` of the Dockerfile (apt and pip inside).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from kstest.orchestrator import REPO

pytestmark = pytest.mark.docker
TAG = "kswarm/agent:test"


@pytest.fixture(scope="module")
def agent_image(docker_daemon: str) -> str:
    done = subprocess.run(
        ["bash", str(REPO / "infra" / "ci" / "agent-image.sh"), TAG],
        capture_output=True,
        text=True,
        timeout=1200,
        env=os.environ,
    )
    assert done.returncode == 0, f"agent image build failed:\n{done.stderr[-4000:]}"
    assert done.stdout.strip().splitlines()[-1] == TAG
    return TAG


@pytest.fixture
def backend() -> str:
    return "docker"


def test_a_swarm_runs_on_the_built_image(swarm_factory, agent_image: str) -> None:
    swarm = swarm_factory(
        "  - pattern: a-{i}\n    count: 2\n", extra=f"docker: {{image: {agent_image}, host_shared: false}}\n"
    )
    swarm.wait_heartbeating(["a-1", "a-2"], timeout=60)
    runtime = swarm.supervisor.runtime

    def sh(script: str) -> tuple[int, str]:
        result = runtime.exec("a-1", ["sh", "-c", script])
        return result.returncode, result.output

    # The image's own Python and package, not the host's (nothing of the host is mounted).
    rc, out = sh("python -c 'import agents, sys; print(sys.prefix, agents.__file__)'")
    assert rc == 0 and out.split()[0] == "/opt/kswarm" and "/opt/kswarm/lib/" in out
    rc, out = sh(f"test -e {REPO} && echo HOST-VISIBLE; id -u; git --version")
    assert "HOST-VISIBLE" not in out and int(out.split()[0]) >= 1000 and "git version" in out
    assert sh("touch /usr/local/bin/pwned")[0] != 0  # read-only root
    rc, out = sh("head -1 /kswarm/memory/MEMORY.md; git config user.email")
    assert "# Memory of a-1" in out and f"a-1@agents.{swarm.spec.swarm}" in out
