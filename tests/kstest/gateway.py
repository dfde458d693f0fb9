"""A real gateway process for tests: ``python -m gateway`` on a free loopback port and a unix socket."""

from __future__ import annotations

import asyncio
import gc
import inspect
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from redis.asyncio import Redis

from gateway.app import create_app
from gateway.config import GatewaySettings
from gateway.plugins import default_plugins
from gateway.principals import PrincipalKind, PrincipalStore
from gateway.server import serve


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


class GatewayClients:
    """Client helpers shared by the in-thread and the subprocess gateway."""

    url: str
    operator_token: str

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


UNSTOPPED: list[str] = []  # gateways whose stop timed out (reported by tests/conftest.py)


class GatewayThread(GatewayClients):
    """A real gateway (real uvicorn, real sockets, default plugins) served from a thread of the
    test process: the same code path as ``python -m gateway`` without paying the import per test."""

    def __init__(
        self,
        home: Path,
        redis_url: str,
        swarm: str = "test",
        operator_token: str | None = None,
        **overrides: object,
    ) -> None:
        """``operator_token``: a second replica on the same Redis reuses the first one's operator."""
        self.home = home
        self.redis_url = redis_url
        self.swarm = swarm
        self.port = free_port()
        self.settings = GatewaySettings(
            redis_url=redis_url,
            home=home,
            port=self.port,
            swarm=swarm,
            **overrides,  # type: ignore[arg-type]
        )
        self.operator_token = operator_token or asyncio.run(
            _create_principal(redis_url, "operator", PrincipalKind.operator, swarm)
        )
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self.app = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def socket_path(self) -> Path:
        return self.settings.socket_path()

    def plugins(self) -> list:
        """The gateway's plugins; suites that configure a component differently override this."""
        return default_plugins()

    def build_app(self) -> FastAPI:
        return create_app(self.settings, plugins=self.plugins())

    def start(self, timeout: float = 30) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        started = threading.Event()
        failure: list[BaseException] = []

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            ready = asyncio.Event()
            self.app = self.build_app()
            waiter = asyncio.create_task(ready.wait())
            waiter.add_done_callback(lambda _: started.set())
            await serve(self.app, self.settings, ready=ready, stop=self._stop)

        def run() -> None:
            try:
                asyncio.run(main())
            except BaseException as exc:  # reported to the starting test
                failure.append(exc)
            finally:
                started.set()

        self._thread = threading.Thread(target=run, name=f"gateway-{self.port}", daemon=True)
        self._thread.start()
        if not started.wait(timeout) or failure:
            raise RuntimeError(f"gateway did not start: {failure!r}")

    def stop(self) -> None:
        if self._thread is None or self._loop is None or self._stop is None:
            return
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        if self._thread.is_alive():
            # A gateway that does not stop is a bug of its own (a loop that swallowed its cancellation
            # once hung every shutdown after a Redis reconnect); left running it would feed, gate and log
            # into the next tests' Redis. Its loop is stopped outright, and what it still ran is reported
            # at the end of the run (tests/conftest.py) for whoever reads a failure after it.
            tasks = asyncio.all_tasks(self._loop)
            held = "; ".join(f"{t.get_name()} at {awaiting(t)}" for t in tasks)
            test = os.environ.get("PYTEST_CURRENT_TEST", "?")  # set by pytest for the phase running now
            stack = thread_stack(self._thread)
            stuck = (
                f"gateway on port {self.port} did not stop within 30 s; its thread runs {stack}; "
                f"still running: {held}"
            )
            UNSTOPPED.append(f"{test}: {stuck}")
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._thread = None


class GatewayProcess(GatewayClients):
    """Start, stop (by pid) and restart a gateway; make clients for principals."""

    def __init__(
        self, home: Path, redis_url: str, swarm: str = "test", extra_env: dict[str, str] | None = None
    ):
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

    def build_app(self) -> FastAPI:
        return create_app(self.settings, plugins=self.plugins())

    def start(self, timeout: float = 30) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway"], env=self.env(), stdout=log, stderr=log
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"gateway exited with {self.proc.returncode}:\n{self.log_path.read_text()}"
                )
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


def awaiting(task: asyncio.Task[Any]) -> str:
    """Where a task waits: its await chain, innermost last (file:line function). An async generator's
    ``asend`` (an ``async with`` of an ``asynccontextmanager``) is followed into the generator."""
    chain, awaited = [], task.get_coro()
    while awaited is not None and len(chain) < 400:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        frame = frame or getattr(awaited, "ag_frame", None)
        if frame is None:
            generator = _async_generator_of(awaited)
            if generator is None:
                chain.append(type(awaited).__name__)
                break
            awaited = generator
            continue
        chain.append(f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno} {frame.f_code.co_name}")
        current = awaited
        awaited = getattr(current, "cr_await", None) or getattr(current, "gi_yieldfrom", None)
        awaited = awaited or getattr(current, "ag_await", None)
    return " > ".join(_fold(chain))


def _fold(chain: list[str]) -> list[str]:
    """A chain with each run of one repeated pair of steps (a merged lifespan per router) shown once."""
    folded: list[str] = []
    for step in chain:
        folded.append(step)
        if len(folded) >= 4 and folded[-4:-2] == folded[-2:]:
            del folded[-2:]
    return folded


def _async_generator_of(awaitable: object) -> Any:
    """The async generator an ``async_generator_asend``/``athrow`` drives (the one object it refers to
    that is an async generator), or None for anything else."""
    if type(awaitable).__name__ not in ("async_generator_asend", "async_generator_athrow"):
        return None
    for referent in gc.get_referents(awaitable):
        if inspect.isasyncgen(referent):
            return referent
    return None


def thread_stack(thread: threading.Thread) -> str:
    """The Python stack a thread runs now, innermost last: a loop blocked in a call shows it here."""
    frame = sys._current_frames().get(thread.ident or -1)
    lines = (
        [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in traceback.extract_stack(frame)]
        if frame
        else []
    )
    return " > ".join(lines[-25:]) or "(no stack)"
