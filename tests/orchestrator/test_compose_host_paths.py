"""The orchestrator in a container hands the daemon host paths: its own mounts, translated."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.runtime.docker import DockerSetupError, HostPaths, own_container_id

CID = "4f" * 32
MOUNTINFO = f"""\
612 540 0:52 / / rw,relatime - overlay overlay rw,lowerdir=/x
630 612 253:1 /var/lib/docker/containers/{CID}/resolv.conf /etc/resolv.conf rw - ext4 /dev/vda rw
631 612 253:1 /var/lib/docker/containers/{CID}/hostname /etc/hostname rw - ext4 /dev/vda rw
632 612 253:1 /var/lib/docker/volumes/kswarm_home/_data /var/lib/kswarm rw - ext4 /dev/vda rw
"""


def test_the_container_id_is_read_from_the_binds_docker_makes() -> None:
    assert own_container_id(MOUNTINFO) == CID
    assert own_container_id("25 1 0:22 / / rw - ext4 /dev/vda rw\n") is None


def test_paths_on_a_mount_are_translated_and_others_refused() -> None:
    paths = HostPaths(
        [
            ("/var/lib/kswarm", "/var/lib/docker/volumes/kswarm_home/_data"),
            ("/run/kswarm-gateway", "/var/lib/docker/volumes/kswarm_gateway-run/_data"),
        ]
    )
    home = Path("/var/lib/kswarm/swarm/data/dev-1/memory")
    assert paths.host(home) == Path("/var/lib/docker/volumes/kswarm_home/_data/swarm/data/dev-1/memory")
    assert paths.host(Path("/run/kswarm-gateway")) == Path("/var/lib/docker/volumes/kswarm_gateway-run/_data")
    with pytest.raises(DockerSetupError, match="on no volume or bind mount"):
        paths.host(Path("/var/lib/kswarmother/x"))  # a sibling with the same prefix is not inside


def test_outside_a_container_paths_are_their_own() -> None:
    assert HostPaths().host(Path("/home/op/.kswarm/run")) == Path("/home/op/.kswarm/run")
