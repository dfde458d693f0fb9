"""A real gateway process for tests: ``python -m gateway`` on a free loopback port and a unix socket."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from redis.asyncio import Redis

from gateway.principals import PrincipalKind, PrincipalStore


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _create_principal(redis_url: str, name: str, kind: PrincipalKind, swarm: str) -> str:
    redis = Redis.from_url(redis_url, decode_responses=True)
    try:
        _, token = await PrincipalStore(redis, swarm).create(name, kind)
        return token
    finally:
        await redis.aclose()


class GatewayProcess:
    """Start, stop (by pid) and restart a gateway; make clients for principals."""

    def __init__(self, home: Path, redis_url: str, swarm: str = "test", extra_env: dict[str, str] | None = None):
        self.home = home
        self.redis_url = redis_url
        self.swarm = swarm
        self.port = free_port()
        self.extra_env = extra_env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = home / "gateway.log"
        self.operator_token = asyncio.run(
            _create_principal(redis_url, "operator", PrincipalKind.operator, swarm)
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def socket_path(self) -> Path:
        return self.home / "run" / "gateway.sock"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KSWARM_")}
        env.update(
            KSWARM_GATEWAY_REDIS_URL=self.redis_url,
            KSWARM_GATEWAY_HOME=str(self.home),
            KSWARM_GATEWAY_PORT=str(self.port),
            KSWARM_GATEWAY_SWARM=self.swarm,
            **self.extra_env,
        )
        return env

    def start(self, timeout: float = 30) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen([sys.executable, "-m", "gateway"], env=self.env(), stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited with {self.proc.returncode}:\n{self.log_path.read_text()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"gateway did not come up:\n{self.log_path.read_text()}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def add_principal(self, name: str, kind: str = "agent") -> str:
        """Create a principal through the REST API (as the operator) and return its token."""
        reply = httpx.post(
            f"{self.url}/api/principals",
            json={"name": name, "kind": kind},
            headers={"Authorization": f"Bearer {self.operator_token}"},
        )
        reply.raise_for_status()
        return reply.json()["token"]

    def client(self, token: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def async_client(self, token: str | None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30)
