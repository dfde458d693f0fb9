"""Docker only, against a real daemon: what an agent container can reach, by trying."""

from __future__ import annotations

import time

import docker
import pytest

from kstest.waiting import wait_for

pytestmark = pytest.mark.docker


@pytest.fixture
def container_swarm(swarm_factory, docker_daemon):
    swarm = swarm_factory("  - name: a-1\n")
    swarm.wait_heartbeating(["a-1"])
    return swarm


@pytest.fixture
def backend() -> str:  # overrides the two-backend parametrisation: these tests are Docker's own
    return "docker"


def run(swarm, script: str) -> tuple[int, str]:
    result = swarm.supervisor.runtime.exec("a-1", ["sh", "-c", script])
    return result.returncode, result.output


def py(swarm, code: str) -> tuple[int, str]:
    import sys

    result = swarm.supervisor.runtime.exec("a-1", [sys.executable, "-c", code])
    return result.returncode, result.output


def test_container_has_only_loopback_and_cannot_connect_anywhere(container_swarm) -> None:
    rc, out = py(container_swarm, "import socket; print(sorted(n for _, n in socket.if_nameindex()))")
    assert rc == 0 and out.strip() == "['lo']"
    port = int(container_swarm.gateway.url.rsplit(":", 1)[1])
    for host, p in [("127.0.0.1", port), ("1.1.1.1", 443), ("8.8.8.8", 53)]:
        code = f"import socket; socket.create_connection(({host!r}, {p}), timeout=2); print('CONNECTED')"
        rc, out = py(container_swarm, code)
        assert rc != 0 and "CONNECTED" not in out, f"connected to {host}:{p}"


def test_container_root_is_read_only_and_tmp_is_writable(container_swarm) -> None:
    for path in ["/pwned", "/usr/pwned", "/etc/pwned", "/kswarm/run/pwned"]:
        rc, _out = run(container_swarm, f"touch {path}")
        assert rc != 0, f"wrote {path}"
    assert run(container_swarm, "touch /tmp/ok && echo ok")[1].strip() == "ok"
    for d in ("work", "history", "home", "memory"):
        assert run(container_swarm, f"touch /kswarm/{d}/ok && echo ok")[1].strip() == "ok", d


def test_container_runs_as_non_root_without_capabilities(container_swarm) -> None:
    _rc, out = run(container_swarm, "id -u; grep CapEff /proc/self/status; grep NoNewPrivs /proc/self/status")
    uid, cap, nnp = out.split("\n")[:3]
    assert int(uid) >= 1000
    assert cap.split()[1] == "0000000000000000"
    assert nnp.split()[1] == "1"
    attrs = docker.from_env().containers.get(container_swarm.supervisor.runtime.container_name("a-1")).attrs
    host = attrs["HostConfig"]
    assert host["ReadonlyRootfs"] and host["NetworkMode"] == "none" and host["CapDrop"] == ["ALL"]
    assert host["PidsLimit"] and host["Memory"] and host["NanoCpus"]


def test_no_docker_socket_is_reachable_inside(container_swarm) -> None:
    _rc, out = run(container_swarm, "find / -xdev -type s 2>/dev/null; ls /kswarm/run")
    sockets = [line for line in out.split("\n") if line.endswith(".sock")]
    assert all("docker" not in s for s in sockets), sockets
    for path in ["/var/run/docker.sock", "/run/docker.sock", "/var/lib/kswarm-dockerd/docker.sock"]:
        assert run(container_swarm, f"test -e {path} && echo present")[1].strip() != "present", path
    mounts = (
        docker.from_env()
        .containers.get(container_swarm.supervisor.runtime.container_name("a-1"))
        .attrs["Mounts"]
    )
    assert not any("docker.sock" in (m.get("Source") or "") for m in mounts)
    # The gateway is reached through its socket directory, read-only.
    assert "gateway.sock" in out


def test_agent_volumes_are_named_and_labelled(container_swarm) -> None:
    client = docker.from_env()
    vols = client.volumes.list(filters={"label": f"kswarm.swarm={container_swarm.spec.swarm}"})
    assert sorted(v.name for v in vols) == sorted(
        f"kswarm-{container_swarm.spec.swarm}-a-1-{w}" for w in ("home", "work", "memory", "history")
    )


# -- what a stopped swarm leaves behind (issue 15), and Docker not ready (issue 18) ----------------

SIXTEEN = [f"dev-{i}" for i in range(1, 17)]


def labelled(swarm_name: str) -> tuple[list[str], list[str]]:
    client = docker.from_env()
    label = {"label": f"kswarm.swarm={swarm_name}"}
    containers = [c.name for c in client.containers.list(all=True, filters=label)]
    volumes = [v.name for v in client.volumes.list(filters=label)]
    return containers, volumes


@pytest.mark.slow
def test_sixteen_agents_stopped_or_purged_leave_no_container_and_no_volume(swarm_factory) -> None:
    """Ctrl-C of `kswarm up`/`kswarm demo` ends in ``shutdown(purge=False)``: no container and no
    volume of the swarm remains (the volumes only pointed at the agents' dirs, which stay); `kswarm
    down --purge` then leaves nothing at all, files included."""
    from orchestrator.supervisor import memory
    from orchestrator.supervisor.main import stop_swarm

    swarm = swarm_factory("  - pattern: dev-{i}\n    count: 16\n    resources: {memory: 256m}\n")
    swarm.wait_heartbeating(SIXTEEN, timeout=120)
    containers, volumes = labelled(swarm.spec.swarm)
    assert len(containers) == 16 and len(volumes) == 64
    swarm.stop_thread()
    swarm.supervisor.shutdown(purge=False)
    assert labelled(swarm.spec.swarm) == ([], [])
    # The files stay: in the agent's disk image where one is mounted (orchestrator/swarm_dir/disk.py),
    # read the way `kswarm agent memory show` reads them while the swarm is down.
    assert "# Memory of dev-3" in memory.show(swarm.layout, "dev-3").memory_md

    swarm.start_thread()  # the same home again: volumes are made anew, bound to the same dirs
    swarm.wait_heartbeating(SIXTEEN, since=time.time(), timeout=120)
    swarm.stop_thread()
    stop_swarm(swarm.layout, swarm.supervisor.runtime, purge=True)
    assert labelled(swarm.spec.swarm) == ([], [])
    assert not swarm.layout.agent_dir("dev-3", "memory").exists()


def test_an_image_that_is_not_built_is_one_line_saying_what_to_run(swarm_factory) -> None:
    swarm = swarm_factory(
        "  - name: a-1\n", extra="docker: {image: kswarm/not-built-here:latest, host_shared: false}\n"
    )
    wait_for(lambda: swarm.record("a-1").last_error, 30, "the failed start")
    error = swarm.record("a-1").last_error
    assert "\n" not in error and "kswarm/not-built-here:latest is not built" in error, error
    assert "kswarm images build" in error
    status = swarm.supervisor.runtime.status("a-1")  # what `kswarm ps` shows, through the runtime
    assert not status.running and "kswarm images build" in status.detail


def test_no_daemon_is_one_line_saying_how_to_start_one(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from orchestrator.runtime.docker import DockerSetupError, docker_client

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    with pytest.raises(DockerSetupError) as caught:
        docker_client()
    line = str(caught.value)
    assert "\n" not in line and f"no Docker daemon at unix://{tmp_path}/no-daemon.sock" in line
    assert "dockerd-start.sh" in line and "DOCKER_HOST" in line
