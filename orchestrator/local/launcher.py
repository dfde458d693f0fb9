"""``kswarm up``: the embedded Redis (unless REDIS_URL), the operator token, the gateway, and a swarm.

What runs where (docs/orchestrator.md, "kswarm up"):

- this process: the gateway (uvicorn on 127.0.0.1 and on the home's unix socket) and the watch that
  restarts the embedded Redis from its AOF when it dies;
- a child process, with ``-f``: the orchestrator (``python -m orchestrator.supervisor``), which runs the
  agents and the pools' job workers (``orchestrator/local/child.py``). Off the gateway's process, so
  that supervising costs the gateway neither memory nor event-loop time.

SIGINT/SIGTERM (Ctrl-C, ``kswarm down``) stop, in this order and saying so: the agents, the job workers,
the gateway, Redis. A second one forces it (agents and workers are killed instead of waited for).

The gateway's components get their settings from here explicitly, the spec over the environment: the
LLM proxy's budgets (``budgets:``) and upstream (``--llm-url``/``KSWARM_LLM_URL``), the job pools
(``pools:``), the task board's dataset repo and leads (the ``kind: dataset`` repo, ``role: lead``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from pydantic import ValidationError
from redis.asyncio import Redis

from gateway.app import create_app
from gateway.client.home import GatewayInfo, write_secret
from gateway.config import GatewaySettings
from gateway.counterexamples.plugin import CounterexamplesPlugin
from gateway.counterexamples.settings import CounterexampleSettings
from gateway.jobs.plugin import JobsPlugin
from gateway.jobs.settings import JobsSettings
from gateway.llm.config import LLMProxySettings
from gateway.logs import configure_logging
from gateway.monitor.plugin import MonitorPlugin
from gateway.monitor.settings import MonitorSettings
from gateway.plugin import Plugin
from gateway.plugins import default_plugins, replace_plugins
from gateway.principals import PrincipalKind, PrincipalStore
from gateway.redis_facade import str_redis
from gateway.server import serve
from gateway.tasks.models import TasksSettings
from gateway.tasks.plugin import TasksPlugin
from orchestrator.local.child import OrchestratorChild
from orchestrator.local.embedded_redis import EmbeddedRedis, EmbeddedRedisError
from orchestrator.spec import SwarmSpec

LLM_URL_ENV = "KSWARM_LLM_URL"
REDIS_WATCH_S = 0.5  # how often the embedded Redis is checked (it is back well within 5 s)


class LaunchError(RuntimeError):
    """kswarm could not start; the message says why."""


def llm_settings(spec: SwarmSpec | None, llm_url: str | None = None) -> tuple[LLMProxySettings, list[str]]:
    """The LLM proxy's settings: the environment's, with the spec's budgets over them field by field
    (a budget the spec sets wins; one it leaves out keeps the environment's), and the upstream from
    ``llm_url`` (``--llm-url``), else ``$KSWARM_LLM_URL``, else ``KSWARM_LLM_UPSTREAM_URL``. Also a
    warning for each setting overridden, so that nobody wonders why their variable does nothing."""
    try:
        env = LLMProxySettings()
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'KSWARM_LLM_*'}: {e['msg']}" for e in exc.errors()
        )
        raise LaunchError(f"bad LLM proxy settings in the environment: {problems}") from None
    warnings: list[str] = []
    url = llm_url or os.environ.get(LLM_URL_ENV) or None
    if url is not None:
        if not url.startswith(("http://", "https://")):
            raise LaunchError(f"bad LLM upstream URL {url!r}: http://host:port or https://...")
        if os.environ.get("KSWARM_LLM_UPSTREAM_URL") and os.environ["KSWARM_LLM_UPSTREAM_URL"] != url:
            warnings.append(f"the LLM upstream {url} replaces KSWARM_LLM_UPSTREAM_URL")
        env = env.model_copy(update={"upstream_url": url.rstrip("/")})
    if spec is None:
        return env, warnings
    from_env, from_spec = env.budgets.given(), spec.budgets.given()
    warnings += [
        f"{path}: the spec's {from_spec[path]} replaces {from_env[path]} from KSWARM_LLM_BUDGETS"
        for path in sorted(from_env.keys() & from_spec.keys())
        if from_env[path] != from_spec[path]
    ]
    return env.model_copy(update={"budgets": spec.budgets.over(env.budgets)}), warnings


def jobs_settings(spec: SwarmSpec) -> tuple[JobsSettings, list[str]]:
    """The job runner's settings: the environment's, with the spec's pools (the spec wins)."""
    env = JobsSettings()
    warnings = []
    if os.environ.get("KSWARM_JOBS_POOLS_FILE") or os.environ.get("KSWARM_JOBS_POOLS"):
        warnings.append("the spec's pools replace KSWARM_JOBS_POOLS / KSWARM_JOBS_POOLS_FILE")
    return env.model_copy(update={"pools": list(spec.pools), "pools_file": None}), warnings


def tasks_settings(spec: SwarmSpec) -> TasksSettings:
    """The task board's settings: the spec's dataset repo, its leads (``role: lead``) post tasks, and its
    ``tasks:`` rules."""
    update: dict[str, Any] = {"leads": spec.leads(), **spec.tasks.model_dump()}
    if spec.dataset_repo() is not None:
        update["dataset_repo"] = spec.dataset_repo()
    return TasksSettings().model_copy(update=update)


def counterexample_settings(spec: SwarmSpec) -> CounterexampleSettings:
    """The counterexample service's settings: the spec's ``counterexamples:`` rules and dataset repo."""
    update: dict[str, Any] = spec.counterexamples.model_dump()
    if spec.dataset_repo() is not None:
        update["dataset_repo"] = spec.dataset_repo()
    return CounterexampleSettings().model_copy(update=update)


def monitor_settings(spec: SwarmSpec) -> tuple[MonitorSettings, list[str]]:
    """The monitor's settings: the environment's, with the spec's alert targets when it names any."""
    try:
        env = MonitorSettings()
    except ValidationError as exc:  # the settings never quote their input: an alert URL is a secret
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise LaunchError(f"bad monitor settings in the environment: {problems}") from None
    if not spec.alerts:
        return env, []
    warnings = ["the spec's alerts replace KSWARM_MONITOR_ALERTS"] if env.alerts else []
    return env.model_copy(update={"alerts": list(spec.alerts)}), warnings


def spec_plugins(spec: SwarmSpec | None, llm: LLMProxySettings) -> tuple[list[Plugin[Any]], list[str]]:
    """The gateway's components for ``spec``: every one, the LLM proxy with ``llm`` (``llm_settings``:
    the swarm's budgets and upstream); with a spec, the job pools, the task board and the monitor's
    alert targets from it. ``kswarm up`` and compose's gateway (infra/compose/kswarm_compose.py) both
    build theirs here, so a spec means the same on both. Also a warning per environment setting the
    spec replaces."""
    plugins = default_plugins(llm)
    if spec is None:
        return plugins, []
    jobs, warnings = jobs_settings(spec)
    monitor, monitor_warnings = monitor_settings(spec)
    plugins = replace_plugins(
        plugins,
        JobsPlugin(jobs),
        TasksPlugin(tasks_settings(spec)),
        MonitorPlugin(monitor),
        CounterexamplesPlugin(counterexample_settings(spec)),
    )
    return plugins, warnings + monitor_warnings


async def ensure_operator_token(redis_url: str, home: Path, swarm: str) -> str:
    """The operator's token: reuse ``operator.token`` while it is valid, else issue a new one."""
    token_file = home / "operator.token"
    redis = str_redis(Redis.from_url(redis_url, decode_responses=True))
    try:
        store = PrincipalStore(redis, swarm)
        if token_file.exists():
            token = token_file.read_text().strip()
            if await store.verify(token) is not None:
                return token
        _, issued = await store.ensure("operator", PrincipalKind.operator)
        token = issued or await store.issue_token("operator")
        write_secret(token_file, token)
        return token
    finally:
        await redis.aclose()


def say(line: str) -> None:
    print(f"kswarm: {line}", file=sys.stderr, flush=True)


class Launcher:
    def __init__(
        self,
        home: Path,
        port: int,
        spec_path: Path | None = None,
        backend: str | None = "process",
        llm_url: str | None = None,
        freeze_heap: bool = False,
    ) -> None:
        self.home = home
        self.freeze_heap = freeze_heap  # the process is this gateway's (gateway.server.freeze_startup_heap)
        self.port = port
        self.spec_path = spec_path
        self.backend = backend
        self.operator_token = ""
        self.warnings: list[str] = []  # shown with the banner
        self.spec: SwarmSpec | None = None
        if spec_path is not None:
            from orchestrator.spec import SpecError, load_spec

            try:
                self.spec = load_spec(spec_path)
            except SpecError as exc:
                raise LaunchError(str(exc)) from exc
            except OSError as exc:
                raise LaunchError(f"cannot read {spec_path}: {exc.strerror}") from exc
            from orchestrator.runtime.runnable import runtime_problems

            if problems := runtime_problems(self.spec, backend):
                raise LaunchError("\n".join(f"{spec_path}: {problem}" for problem in problems))
        self.llm, llm_warnings = llm_settings(self.spec, llm_url)
        self.warnings += llm_warnings
        self.degraded: str | None = None  # what /healthz named when the gateway came up, if not healthy
        self.signals = 0
        self.stop_requested = asyncio.Event()
        self.forced = asyncio.Event()

    def gateway_plugins(self) -> list[Plugin[Any]]:
        """Every component, as ``spec_plugins`` makes them for this swarm."""
        plugins, warnings = spec_plugins(self.spec, self.llm)
        self.warnings += warnings
        return plugins

    def gateway_app(self, settings: GatewaySettings) -> FastAPI:
        """The gateway ``run`` serves."""
        return create_app(settings, plugins=self.gateway_plugins())

    def _signalled(self) -> None:
        self.signals += 1
        if self.signals == 1:
            say("stopping (Ctrl-C again to force) ...")
            self.stop_requested.set()
        elif self.signals == 2:
            say("forcing: agents and workers are killed, not waited for")
            self.forced.set()
        else:
            say("stopped without cleaning up: `kswarm down` stops what is left")
            os._exit(130)

    def _take_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._signalled)

    async def run(self, on_ready: Callable[[GatewayInfo], Awaitable[None]]) -> int:
        """Start everything, await ``on_ready`` (it may call the gateway: it runs in this loop), serve
        until signalled; then stop it all in order. Returns 0 after a clean stop."""
        configure_logging()  # before the gateway's components are built (see gateway/logs.py)
        self._take_signals()
        began_stop = 0.0
        with ExitStack() as stack:
            redis_url = os.environ.get("REDIS_URL") or ""
            embedded: EmbeddedRedis | None = None
            if not redis_url:
                embedded = EmbeddedRedis(self.home)
                try:
                    redis_url = embedded.ensure_running()
                except EmbeddedRedisError as exc:
                    raise LaunchError(str(exc)) from exc
                stack.callback(self._release_redis, embedded)
            swarm = self.spec.swarm if self.spec is not None else "kswarm"
            settings = GatewaySettings(redis_url=redis_url, home=self.home, port=self.port, swarm=swarm)
            self.operator_token = await ensure_operator_token(redis_url, self.home, swarm)
            app = self.gateway_app(settings)
            ready, stop_gateway = asyncio.Event(), asyncio.Event()
            server = asyncio.create_task(serve(app, settings, ready, stop_gateway, self.freeze_heap))
            ready_wait = asyncio.create_task(ready.wait())
            await asyncio.wait([server, ready_wait], return_when=asyncio.FIRST_COMPLETED)
            if server.done():
                ready_wait.cancel()
                await server  # re-raises the start-up failure
                raise LaunchError("the gateway stopped during start-up")
            self._take_signals()  # uvicorn took them while starting; we stop things in our order
            info = GatewayInfo(url=settings.url(), socket=str(settings.socket_path()), pid=os.getpid())
            info.write(self.home)
            stack.callback(lambda: (self.home / "gateway.json").unlink(missing_ok=True))
            watch = asyncio.create_task(self._watch_redis(embedded)) if embedded is not None else None
            child = None
            if self.spec is not None and self.spec_path is not None:
                child = OrchestratorChild(
                    self.home,
                    self.spec_path.resolve(),
                    self.backend or self.spec.backend,
                    settings.url(),
                    settings.socket_path(),
                    redis_url,
                    say,
                )
                await child.start()
            self.degraded = await self._health(settings.url())
            await on_ready(info)
            stopped = asyncio.create_task(self.stop_requested.wait())
            await asyncio.wait([server, stopped], return_when=asyncio.FIRST_COMPLETED)
            began_stop = time.monotonic()
            if child is not None:
                say("stopping the agents, then the job workers ...")
                if not await child.stop(self.forced):
                    say("the orchestrator did not stop in time and was killed: `kswarm down` stops the rest")
            if watch is not None:
                watch.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watch
            stop_gateway.set()
            with contextlib.suppress(asyncio.CancelledError):
                await server
            stopped.cancel()
            say("gateway stopped")
            self._take_signals()  # uvicorn gave them back to the default handlers
        say(f"everything stopped in {time.monotonic() - began_stop:.1f} s")
        return 0

    @staticmethod
    async def _health(url: str) -> str | None:
        import httpx

        try:
            async with httpx.AsyncClient(timeout=5.0) as client:
                reply = await client.get(f"{url}/healthz")
            body = reply.json()
        except (httpx.HTTPError, ValueError) as exc:
            return f"/healthz: {exc}"
        return None if reply.status_code == 200 else str(body.get("detail") or reply.status_code)

    def _release_redis(self, embedded: EmbeddedRedis) -> None:
        embedded.release()
        if embedded.pid is None:
            say("redis stopped")
        else:
            say("redis left running: another kswarm on this home uses it")

    async def _watch_redis(self, embedded: EmbeddedRedis) -> None:
        """Restart the embedded Redis from its AOF when it dies; the gateway's pool reconnects."""
        down_since: float | None = None
        while True:
            await asyncio.sleep(REDIS_WATCH_S)
            try:
                healed = await asyncio.to_thread(embedded.heal)
            except EmbeddedRedisError as exc:
                if down_since is None:
                    down_since = time.monotonic()
                    say(f"redis is down and could not be restarted yet: {exc}".splitlines()[0])
                continue
            if healed is not None:
                old, new = healed
                took = f" after {time.monotonic() - down_since:.1f} s" if down_since else ""
                say(f"redis (pid {old}) died; restarted from its append-only file as pid {new}{took}")
            down_since = None
