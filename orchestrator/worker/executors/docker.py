"""The docker executor: one container per job attempt, no network, read-only everything but its output.

``container_request(spec)`` is the exact keyword set given to ``client.containers.run``; tests check it
without a device. Paths are mounted at the same paths inside, so the harness command is the host's:
the checkout read-only, the output dir read-write, and (host-shared mode, the default) ``/usr /lib
/lib64 /bin /etc``, the Python prefixes and the project read-only over an empty image. GPUs come in as a
device request for exactly the allocated ids (the container sees them as 0..N-1, and
``CUDA_VISIBLE_DEVICES`` says so); Ascend NPUs as ``/dev/davinci<id>`` plus the shared control devices
and the driver directory (``ASCEND_RT_VISIBLE_DEVICES`` keeps the physical ids: unverified on hardware).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from gateway.client.jobs.executors import DockerOptions, ExecutorOptions
from orchestrator.worker.executors.base import ExecOutcome, ExecSpec, OnOutput, OutputCap, drop_planted_record

HOST_SHARED = ("/usr", "/lib", "/lib64", "/bin", "/etc")
ASCEND_CONTROL_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
ASCEND_DRIVER_MOUNTS = ("/usr/local/Ascend/driver", "/usr/local/dcmi", "/usr/local/bin/npu-smi")
JOB_USER = "65534:65534"


def host_shared_paths() -> list[str]:
    """Read-only host paths the empty image needs to run the host's Python and the project."""
    root = Path(__file__).resolve().parents[3]
    prefixes = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), root}
    shared = [Path(p) for p in HOST_SHARED]
    extra = sorted(p for p in prefixes if not any(p.is_relative_to(s) for s in shared))
    return [str(p) for p in [*shared, *extra]]


class DockerExecutor:
    kind = "docker"
    options_model: ClassVar[type[ExecutorOptions]] = DockerOptions
    unavailable: str | None = None  # a daemon that cannot start a container fails that job, with why

    def __init__(
        self,
        client_factory: Callable[[], Any] | None = None,
        shared_paths: list[str] | None = None,
        user: str = JOB_USER,
        poll_s: float = 0.2,
    ) -> None:
        self._client_factory = client_factory
        self.shared_paths = shared_paths if shared_paths is not None else host_shared_paths()
        self.user = user
        self.poll_s = poll_s
        self._client: Any = None

    def client(self) -> Any:
        if self._client is None:
            if self._client_factory is None:
                import docker

                self._client = docker.from_env()
            else:
                self._client = self._client_factory()
        return self._client

    @staticmethod
    def container_name(spec: ExecSpec) -> str:
        return f"kswarm-job-{spec.job_id}-{spec.attempt}"

    def container_request(self, spec: ExecSpec) -> dict[str, Any]:
        """The keyword arguments of ``containers.run`` for this attempt."""
        from docker.types import DeviceRequest, Mount, Ulimit

        limits = spec.limits
        env = dict(spec.env)
        mounts = [Mount(p, p, type="bind", read_only=True) for p in self.shared_paths if Path(p).exists()]
        mounts += [
            Mount(str(spec.checkout), str(spec.checkout), type="bind", read_only=True),
            Mount(str(spec.outdir), str(spec.outdir), type="bind", read_only=False),
        ]
        if spec.task_dir is not None:  # main's task definition, cached in the worker's dir: not shared
            mounts.append(Mount(str(spec.task_dir), str(spec.task_dir), type="bind", read_only=True))
        device_requests: list[Any] = []
        devices: list[str] = []
        if spec.device == "cuda" and spec.devices:
            device_requests.append(
                DeviceRequest(
                    driver="nvidia", device_ids=[str(d) for d in spec.devices], capabilities=[["gpu"]]
                )
            )
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(spec.devices)))
        elif spec.device == "npu" and spec.devices:
            devices += [f"/dev/davinci{d}:/dev/davinci{d}:rwm" for d in spec.devices]
            devices += [f"{d}:{d}:rwm" for d in ASCEND_CONTROL_DEVICES]
            mounts += [Mount(p, p, type="bind", read_only=True) for p in ASCEND_DRIVER_MOUNTS]
            env["ASCEND_RT_VISIBLE_DEVICES"] = ",".join(str(d) for d in spec.devices)
        cpu_s = limits.cpu_time_s or int(spec.timeout_s * 2) + 30
        return {
            "image": spec.image,
            "command": list(spec.argv),
            "name": self.container_name(spec),
            "labels": {
                "kswarm.job": spec.job_id,
                "kswarm.attempt": str(spec.attempt),
                "kswarm.pool": spec.pool,
            },
            "detach": True,
            "environment": env,
            "user": self.user,
            "working_dir": str(spec.outdir),
            "mounts": mounts,
            "network_mode": "none",
            "read_only": True,
            "tmpfs": {"/tmp": "rw,nosuid,nodev,size=512m,mode=1777"},
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "mem_limit": limits.memory_bytes,
            "memswap_limit": limits.memory_bytes,
            "nano_cpus": int(limits.cpus * 1e9),
            "pids_limit": limits.nproc,
            "ulimits": [
                Ulimit(name="nofile", soft=limits.nofile, hard=limits.nofile),
                Ulimit(name="fsize", soft=limits.file_bytes, hard=limits.file_bytes),
                Ulimit(name="cpu", soft=cpu_s, hard=cpu_s),
                Ulimit(name="core", soft=0, hard=0),
            ],
            "device_requests": device_requests,
            "devices": devices,
            "restart_policy": {"Name": "no"},
        }

    def isolation(self) -> list[str]:
        return ["network: none (container)", "root fs: read-only", f"user: {self.user}", "caps: none"]

    async def run(
        self, spec: ExecSpec, cancel: asyncio.Event, on_output: OnOutput | None = None
    ) -> ExecOutcome:
        import docker.errors

        cap = OutputCap(spec.limits.output_bytes, on_output)
        started = time.monotonic()
        request = self.container_request(spec)
        client = self.client()
        if os.geteuid() == 0 and self.user.split(":")[0].isdigit():
            uid, _, gid = self.user.partition(":")
            for path in [spec.outdir, *spec.outdir.rglob("*")]:
                os.chown(path, int(uid), int(gid or uid), follow_symlinks=False)
        try:
            stale = await asyncio.to_thread(
                client.containers.list, all=True, filters={"name": request["name"]}
            )
            for old in stale:  # an earlier run of this very attempt (worker restarted mid-way)
                await asyncio.to_thread(old.remove, force=True)
            container = await asyncio.to_thread(client.containers.run, **request)
        except docker.errors.DockerException as exc:
            return ExecOutcome(
                returncode=None, error=f"cannot start the container: {exc}", isolation=self.isolation()
            )
        timed_out = cancelled = False
        returncode: int | None = None
        try:
            deadline = started + spec.timeout_s
            while True:
                await asyncio.to_thread(container.reload)
                if container.status in ("exited", "dead"):
                    returncode = int(container.attrs.get("State", {}).get("ExitCode", -1))
                    break
                if cancel.is_set():
                    cancelled = True
                    break
                if time.monotonic() > deadline:
                    timed_out = True
                    break
                await asyncio.sleep(self.poll_s)
            if returncode is None:
                await asyncio.to_thread(container.kill)
            logs = await asyncio.to_thread(container.logs, stdout=True, stderr=True)
            cap.feed(logs)
        finally:
            try:
                await asyncio.to_thread(container.remove, force=True)
            except docker.errors.DockerException:
                pass
        drop_planted_record(spec)
        return ExecOutcome(
            returncode=returncode,
            timed_out=timed_out,
            cancelled=cancelled,
            output=cap.text(),
            truncated=cap.truncated,
            wall_s=time.monotonic() - started,
            isolation=self.isolation(),
            detail={"container": request["name"]},
        )
