"""``kswarm up``: embedded Redis (unless REDIS_URL), the operator token, the gateway, and a swarm.

Everything started here is stopped here, in reverse order, however the gateway exits.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from redis.asyncio import Redis

from gateway.app import create_app
from gateway.config import GatewaySettings
from gateway.plugins import default_plugins
from gateway.principals import PrincipalKind, PrincipalStore
from gateway.server import serve
from orchestrator.embedded_redis import EmbeddedRedis, EmbeddedRedisError
from orchestrator.home import GatewayInfo, write_secret


class LaunchError(RuntimeError):
    """kswarm could not start; the message says why."""


async def ensure_operator_token(redis_url: str, home: Path, swarm: str) -> str:
    """The operator's token: reuse ``operator.token`` while it is valid, else issue a new one."""
    token_file = home / "operator.token"
    redis = Redis.from_url(redis_url, decode_responses=True)
    try:
        store = PrincipalStore(redis, swarm)
        if token_file.exists():
            token = token_file.read_text().strip()
            if await store.verify(token) is not None:
                return token
        _, token = await store.ensure("operator", PrincipalKind.operator)
        if token is None:
            token = await store.issue_token("operator")
        write_secret(token_file, token)
        return token
    finally:
        await redis.aclose()


class Launcher:
    def __init__(
        self, home: Path, port: int, spec_path: Path | None = None, backend: str = "process"
    ) -> None:
        self.home = home
        self.port = port
        self.spec_path = spec_path
        self.backend = backend
        self.operator_token = ""
        self.warnings: list[str] = []  # shown with the banner (e.g. the process backend cannot isolate)
        self.spec = None
        if spec_path is not None:
            from orchestrator.spec import SpecError, load_spec

            try:
                self.spec = load_spec(spec_path)
            except SpecError as exc:
                raise LaunchError(str(exc)) from exc
            except OSError as exc:
                raise LaunchError(f"cannot read {spec_path}: {exc.strerror}") from exc

    async def run(self, on_ready: Callable[[GatewayInfo], None]) -> None:
        with ExitStack() as stack:
            redis_url = os.environ.get("REDIS_URL")
            if not redis_url:
                embedded = EmbeddedRedis(self.home)
                try:
                    redis_url = embedded.ensure_running()
                except EmbeddedRedisError as exc:
                    raise LaunchError(str(exc)) from exc
                stack.callback(embedded.release)
            swarm = self.spec.swarm if self.spec is not None else "kswarm"
            settings = GatewaySettings(redis_url=redis_url, home=self.home, port=self.port, swarm=swarm)
            self.operator_token = await ensure_operator_token(redis_url, self.home, swarm)
            app = create_app(settings, plugins=default_plugins())
            ready = asyncio.Event()
            server = asyncio.create_task(serve(app, settings, ready))
            ready_wait = asyncio.create_task(ready.wait())
            await asyncio.wait([server, ready_wait], return_when=asyncio.FIRST_COMPLETED)
            if server.done():
                ready_wait.cancel()
                await server  # re-raises the start-up failure
                return
            info = GatewayInfo(url=settings.url(), socket=str(settings.socket_path()), pid=os.getpid())
            info.write(self.home)
            stack.callback(lambda: (self.home / "gateway.json").unlink(missing_ok=True))
            if self.spec is not None:
                stack.enter_context(self._supervise(settings))
            on_ready(info)
            await server

    @contextmanager
    def _supervise(self, settings: GatewaySettings) -> Iterator[None]:
        """Run the swarm's reconcile loop in a thread for as long as the gateway serves."""
        from orchestrator.supervisor import Supervisor

        assert self.spec is not None
        stop = threading.Event()
        supervisor = Supervisor(
            spec=self.spec,
            backend=self.backend or self.spec.backend,
            home=self.home,
            gateway_url=settings.url(),
            operator_token=self.operator_token,
            socket_path=settings.socket_path(),
        )
        if supervisor.warning:
            self.warnings.append(supervisor.warning)
        thread = threading.Thread(target=supervisor.run, args=(stop,), name="supervisor", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=60)
