"""The ``docker`` backend: one container per agent, through the Docker SDK.

Containers are named ``kswarm-<swarm>-<agent>`` (so Docker itself refuses a duplicate) and labelled
``kswarm.swarm``/``kswarm.agent`` (so a restarted orchestrator finds and adopts them). Each gets
``network_mode=none``, a read-only root, a tmpfs ``/tmp``, its own non-root uid, no capabilities,
``no-new-privileges``, memory/CPU/pids limits, the gateway's socket *directory* and four named
volumes (home, work, memory, history). It never gets the Docker socket.

The volumes are local named volumes bound to the agent's dirs under ``$KSWARM_HOME/swarm/data``, so
provisioning, memory snapshots and rollbacks work on the same files for both backends. They are only
pointers to those dirs: ``remove`` deletes them with the container (the files stay; ``purge`` deletes
the files too), so a stopped swarm leaves no container and no volume behind.

When the orchestrator itself runs in a container (compose), the paths it hands the daemon are
translated to the host paths of its own mounts (``HostPaths``): the daemon resolves bind sources on
the host, not inside the orchestrator's container.

A missing daemon or image is a ``DockerSetupError``: one line that says what to run.

Host-shared mode runs the host's Python and the kswarm source from an empty image through read-only
bind mounts of ``/usr /lib /lib64 /bin /etc``, the Python prefix and the project dir.
"""

from __future__ import annotations

import builtins
import io
import os
import re
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.types import Mount

from orchestrator.runtime.base import (
    LABEL_AGENT,
    LABEL_SWARM,
    AgentPaths,
    ExecResult,
    LaunchSpec,
    RuntimeStatus,
    agent_command,
    agent_environment,
    project_root,
    python_paths,
)
from orchestrator.spec import DockerOptions
from orchestrator.swarm_dir.provision import DIRS, SwarmLayout, purge_agent, release_disk
from orchestrator.swarm_dir.uid_ranges import FIRST_UID

VIEW = Path("/kswarm")  # where an agent's dirs appear inside its container
HOST_SHARED = ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc")
EMPTY_IMAGE = "kswarm/empty"
BUILD_HINT = "run `kswarm images build` (docs/deploy.md)"
DAEMON_HINT = (
    "start one (`sudo systemctl start docker`; a private one: `infra/ci/dockerd-start.sh`, then export the "
    "DOCKER_HOST it prints) or point DOCKER_HOST at a running daemon"
)
CONTAINER_ID = re.compile(r"/containers/([0-9a-f]{64})/")


class DockerSetupError(RuntimeError):
    """Docker is not ready for kswarm (no daemon, an image not built, a path it cannot share): one
    line that names what is missing and what to run. Never a traceback's worth of text."""


def daemon_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def docker_client(timeout: int = 60) -> docker.DockerClient:
    """A client of the daemon ``DOCKER_HOST`` names (the default socket otherwise), checked to answer."""
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except DockerException as exc:
        reason = str(exc).split("\n")[0]
        if "Connection aborted" in reason or "No such file" in reason or "Connection refused" in reason:
            reason = "nothing answers there"
        where = daemon_address()
        raise DockerSetupError(f"no Docker daemon at {where} ({reason[:160]}): {DAEMON_HINT}") from None
    return client


def missing_image(image: str) -> DockerSetupError:
    return DockerSetupError(f"image {image} is not built: {BUILD_HINT}")


def own_container_id(mountinfo: str | None = None) -> str | None:
    """The id of the container this process runs in (Docker binds /etc/hostname, /etc/hosts and
    /etc/resolv.conf from ``.../containers/<id>/``); None outside a container."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return None
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4 and fields[4] in ("/etc/hostname", "/etc/hosts", "/etc/resolv.conf"):
            found = CONTAINER_ID.search(fields[3])
            if found:
                return found.group(1)
    return None


class HostPaths:
    """Paths of this process as the Docker daemon's host sees them.

    Outside a container a path is its own host path. Inside one (the orchestrator of compose.yaml) a
    path is translated through the container's mounts (bind or volume): the longest destination that
    holds it, onto that mount's source on the host. A path on no mount cannot be shared with another
    container and is refused, naming what to mount."""

    def __init__(self, mounts: builtins.list[tuple[str, str]] | None = None) -> None:
        # (destination inside, source on the host), longest destination first
        self.mounts = sorted(mounts or [], key=lambda m: len(m[0]), reverse=True)
        self.in_container = mounts is not None

    @classmethod
    def detect(cls, client: docker.DockerClient) -> HostPaths:
        cid = own_container_id()
        if cid is None:
            return cls()
        try:
            attrs = client.api.inspect_container(cid)
        except DockerException:
            return cls()  # a container of another daemon (docker-in-docker): paths are its host's
        return cls([(m["Destination"], m["Source"]) for m in attrs.get("Mounts", []) if m.get("Source")])

    def host(self, path: Path) -> Path:
        if not self.in_container:
            return path
        text = str(path)
        for dest, source in self.mounts:
            if text == dest or text.startswith(dest.rstrip("/") + "/"):
                return Path(source + text[len(dest.rstrip("/")) :])
        raise DockerSetupError(
            f"{path} is on no volume or bind mount of the orchestrator's container: mount a volume there "
            "(compose.yaml mounts the home and the gateway's socket dir)"
        )


def _parse_time(value: str) -> float | None:
    if not value or value.startswith("0001-"):
        return None
    # Docker gives nanoseconds; Python parses at most microseconds.
    head, _, rest = value.partition(".")
    frac = "".join(ch for ch in rest if ch.isdigit())[:6]
    return datetime.fromisoformat(f"{head}.{frac or '0'}+00:00").timestamp()


def ensure_empty_image(client: docker.DockerClient, name: str = EMPTY_IMAGE) -> None:
    """The empty base image of the host-shared mode (nothing can be pulled here): an empty tar."""
    try:
        client.images.get(name)
    except NotFound:
        buf = io.BytesIO()
        tarfile.open(fileobj=buf, mode="w").close()
        repo, _, tag = name.partition(":")
        client.api.import_image_from_data(buf.getvalue(), repository=repo, tag=tag or "latest")


class DockerRuntime:
    """``AgentRuntime`` for Docker containers."""

    backend = "docker"

    def __init__(
        self,
        layout: SwarmLayout,
        swarm: str,
        options: DockerOptions | None = None,
        client: docker.DockerClient | None = None,
    ) -> None:
        self.layout = layout
        self.swarm = swarm
        self.options = options or DockerOptions()
        self.client = client or docker_client()
        self.warning: str | None = None
        self._image_lock = threading.Lock()
        self.host_paths = HostPaths.detect(self.client)
        # Why the last start of an agent failed (a missing image...), until one succeeds: its status says it.
        self.errors: dict[str, str] = {}

    # -- names ------------------------------------------------------------------------------
    def container_name(self, name: str) -> str:
        return f"kswarm-{self.swarm}-{name}"

    def volume_name(self, name: str, which: str) -> str:
        return f"kswarm-{self.swarm}-{name}-{which}"

    def _labels(self, name: str) -> dict[str, str]:
        return {LABEL_SWARM: self.swarm, LABEL_AGENT: name}

    def _container(self, name: str) -> Any | None:
        try:
            return self.client.containers.get(self.container_name(name))
        except NotFound:
            return None

    # -- volumes and mounts -----------------------------------------------------------------
    def _ensure_volume(self, name: str, which: str) -> str:
        vol = self.volume_name(name, which)
        host_dir = self.host_paths.host(self.layout.agent_dir(name, which))
        try:
            existing = self.client.volumes.get(vol)
            if existing.attrs.get("Options", {}).get("device") == str(host_dir):
                return vol
            existing.remove(force=True)  # bound to a stale path (the home moved): rebind
        except NotFound:
            pass
        self.client.volumes.create(
            vol,
            driver="local",
            driver_opts={"type": "none", "o": "bind", "device": str(host_dir)},
            labels={**self._labels(name), "kswarm.volume": which},
        )
        return vol

    def _mounts(self, launch: LaunchSpec) -> list[Mount]:
        name = launch.agent.name
        # no_copy: Docker would otherwise "copy up" into an empty volume and chown it to root.
        mounts = [
            Mount(str(VIEW / w), self._ensure_volume(name, w), type="volume", no_copy=True) for w in DIRS
        ]
        assert launch.gateway_socket is not None
        # The socket's directory, not the socket file: a file bind goes stale when the gateway recreates it.
        socket_dir = self.host_paths.host(launch.gateway_socket.parent)
        mounts.append(Mount(str(VIEW / "run"), str(socket_dir), type="bind", read_only=True))
        if self.options.host_shared:
            shared = [Path(p) for p in HOST_SHARED if Path(p).exists()]
            shared += [
                p for p in [*python_paths(), project_root()] if not any(p.is_relative_to(s) for s in shared)
            ]
            for src in shared:
                mounts.append(Mount(str(src), str(src), type="bind", read_only=True))
        return mounts

    # -- protocol ---------------------------------------------------------------------------
    def start(self, launch: LaunchSpec) -> RuntimeStatus:
        """Start the agent's container; a ``DockerSetupError`` (one line) when Docker is not ready."""
        try:
            status = self._start(launch)
        except ImageNotFound:
            self.errors[launch.agent.name] = str(missing_image(self.options.image))
            raise missing_image(self.options.image) from None
        except DockerSetupError as exc:
            self.errors[launch.agent.name] = str(exc)
            raise
        self.errors.pop(launch.agent.name, None)
        return status

    def _start(self, launch: LaunchSpec) -> RuntimeStatus:
        name = launch.agent.name
        existing = self._container(name)
        if existing is not None:
            existing.reload()
            if existing.status in ("running", "restarting"):
                return self._status_of(name, existing)
            existing.remove(force=True)  # an exited one: replaced, its volumes stay
        if self.options.image == EMPTY_IMAGE:
            with self._image_lock:  # starts run in parallel; import the image once
                ensure_empty_image(self.client)
        else:
            try:
                self.client.images.get(self.options.image)
            except ImageNotFound:
                raise missing_image(self.options.image) from None
        assert launch.gateway_socket is not None
        view = AgentPaths(
            home=VIEW / "home",
            work=VIEW / "work",
            memory=VIEW / "memory",
            history=VIEW / "history",
            socket=VIEW / "run" / launch.gateway_socket.name,
        )
        res = launch.agent.resources
        uid = launch.uid if launch.uid is not None else (self.options.uid_base or FIRST_UID)
        python = None if self.options.host_shared else "python"
        command = agent_command(launch, python)
        if self.options.host_shared and command[0] in ("python", "python3"):
            command[0] = sys.executable  # under a mounted prefix: same path inside
        container = self.client.containers.run(
            self.options.image,
            command,
            name=self.container_name(name),
            labels=self._labels(name),
            detach=True,
            environment=agent_environment(launch, view),
            user=f"{uid}:{uid}",
            working_dir=str(view.work),
            mounts=self._mounts(launch),
            network_mode="none",
            read_only=True,
            tmpfs={"/tmp": "rw,nosuid,nodev,size=256m,mode=1777"},
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            mem_limit=res.memory_bytes(),
            nano_cpus=int(res.cpus * 1e9),
            pids_limit=res.pids,
            # The disk bound: the agent's dirs are inside its mounted disk image
            # (orchestrator/swarm_dir/disk.py), and no single file grows past resources.disk (here the
            # watchdog's only per-write limit).
            ulimits=[
                docker.types.Ulimit(name="nofile", soft=res.disk_files, hard=res.disk_files),
                docker.types.Ulimit(name="fsize", soft=res.disk_bytes(), hard=res.disk_bytes()),
            ]
            + (
                [docker.types.Ulimit(name="cpu", soft=res.cpu_time_s, hard=res.cpu_time_s)]
                if res.cpu_time_s
                else []
            ),
            restart_policy={"Name": "no"},  # the reconcile loop restarts, with backoff and a visible state
        )
        container.reload()
        return self._status_of(name, container)

    def _status_of(self, name: str, container: Any) -> RuntimeStatus:
        state = container.attrs.get("State", {})
        running = state.get("Running", False)
        return RuntimeStatus(
            name,
            bool(running),
            container.id[:12],
            _parse_time(state.get("StartedAt", "")),
            None if running else state.get("ExitCode"),
            container.status,
        )

    def status(self, name: str) -> RuntimeStatus:
        """Its container's state; with no container, why the last start failed (``detail``), if it did."""
        container = self._container(name)
        if container is None:
            return RuntimeStatus(name, False, detail=self.errors.get(name, ""))
        return self._status_of(name, container)

    def list(self) -> dict[str, RuntimeStatus]:
        found = self.client.containers.list(all=True, filters={"label": f"{LABEL_SWARM}={self.swarm}"})
        return {c.labels[LABEL_AGENT]: self._status_of(c.labels[LABEL_AGENT], c) for c in found}

    def stop(self, name: str, timeout: float = 10.0) -> None:
        container = self._container(name)
        if container is not None:
            try:
                container.stop(timeout=int(timeout))
            except APIError:
                pass

    def logs(self, name: str, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        container = self._container(name)
        if container is None:
            return
        stream = container.logs(stream=True, follow=follow, tail=tail if tail else "all")
        pending = b""
        for chunk in stream:
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line.decode(errors="replace") + "\n"
        if pending:
            yield pending.decode(errors="replace")

    def exec(self, name: str, argv: builtins.list[str], timeout: float = 60.0) -> ExecResult:
        container = self._container(name)
        if container is None:
            raise RuntimeError(f"agent {name} has no container")
        code, output = container.exec_run(argv, demux=False)
        return ExecResult(code, (output or b"").decode(errors="replace"))

    def remove(self, name: str, purge: bool = False) -> None:
        """Remove the container and its volumes. The volumes only point at the agent's dirs in the home:
        the files stay (a new start binds them again) unless ``purge`` deletes them too."""
        container = self._container(name)
        if container is not None:
            try:
                container.remove(force=True)
            except NotFound:
                pass
            deadline = time.monotonic() + 10
            while self._container(name) is not None and time.monotonic() < deadline:
                time.sleep(0.05)
        for which in DIRS:
            try:
                self.client.volumes.get(self.volume_name(name, which)).remove(force=True)
            except NotFound:
                pass
        self.errors.pop(name, None)
        release_disk(self.layout, name)  # after the container: it no longer binds dirs inside the image
        if purge:
            purge_agent(self.layout, name)

    def volumes(self) -> builtins.list[str]:
        found = self.client.volumes.list(filters={"label": f"{LABEL_SWARM}={self.swarm}"})
        return sorted(v.name for v in found)
