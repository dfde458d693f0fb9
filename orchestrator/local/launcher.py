"""``kswarm up``: embedded Redis (unless REDIS_URL), the operator token, the gateway, and a swarm.

Everything started here is stopped here, in reverse order, however the gateway exits. The gateway's
components get their settings from here explicitly: the LLM proxy's budgets come from the spec's
``budgets:`` (over ``KSWARM_LLM_BUDGETS__*`` from the environment, field by field).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from fastapi import FastAPI
from pydantic import ValidationError
from redis.asyncio import Redis

from gateway.app import create_app
from gateway.client.home import GatewayInfo, write_secret
from gateway.config import GatewaySettings
from gateway.llm.config import LLMProxySettings
from gateway.plugins import default_plugins
from gateway.principals import PrincipalKind, PrincipalStore
from gateway.server import serve
from orchestrator.local.embedded_redis import EmbeddedRedis, EmbeddedRedisError
from orchestrator.spec import SwarmSpec


class LaunchError(RuntimeError):
    """kswarm could not start; the message says why."""


def llm_settings(spec: SwarmSpec | None) -> tuple[LLMProxySettings, list[str]]:
    """The LLM proxy's settings: the environment's, with the spec's budgets over them field by field
    (a budget the spec sets wins; one it leaves out keeps the environment's). Also a warning for
    each budget the spec overrides, so that nobody wonders why their variable does nothing."""
    try:
        env = LLMProxySettings()
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'KSWARM_LLM_*'}: {e['msg']}" for e in exc.errors()
        )
        raise LaunchError(f"bad LLM proxy settings in the environment: {problems}") from None
    if spec is None:
        return env, []
    from_env, from_spec = env.budgets.given(), spec.budgets.given()
    warnings = [
        f"{path}: the spec's {from_spec[path]} replaces {from_env[path]} from KSWARM_LLM_BUDGETS"
        for path in sorted(from_env.keys() & from_spec.keys())
        if from_env[path] != from_spec[path]
    ]
    return env.model_copy(update={"budgets": spec.budgets.over(env.budgets)}), warnings


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
        self.spec: SwarmSpec | None = None
        if spec_path is not None:
            from orchestrator.spec import SpecError, load_spec

            try:
                self.spec = load_spec(spec_path)
            except SpecError as exc:
                raise LaunchError(str(exc)) from exc
            except OSError as exc:
                raise LaunchError(f"cannot read {spec_path}: {exc.strerror}") from exc
        self.llm, budget_warnings = llm_settings(self.spec)
        self.warnings += budget_warnings

    def gateway_app(self, settings: GatewaySettings) -> FastAPI:
        """The gateway ``run`` serves: every component, the LLM proxy with this swarm's budgets."""
        return create_app(settings, plugins=default_plugins(self.llm))

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
            app = self.gateway_app(settings)
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
            redis_url=settings.redis_url,  # the seam (docs/orchestrator.md, "The control stream")
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
