"""Everything ``kswarm demo`` starts, in one foreground process, stopped in reverse order.

Like ``kswarm up`` (``orchestrator.local.launcher``): the embedded Redis, the gateway on TCP and its unix
socket, the swarm supervisor in a thread -- plus the demo's own parts: every gateway component
configured for the demo (jobs with the catalogue's tasks, the task board with the lead, the dataset
and knowledge repos) and a job worker process for the ``cpu`` pool. What it starts it stops, by pid:
the worker, the agents (through the supervisor's runtime), the gateway, then Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from redis.asyncio import Redis

from gateway.app import create_app
from gateway.client.home import GatewayInfo, write_secret
from gateway.client.jobs.pools import NodeConfig, PoolConfig
from gateway.config import GatewaySettings
from gateway.llm.config import LLMProxySettings, scrub_env
from gateway.plugin import Plugin
from gateway.principals import PrincipalKind, PrincipalStore
from gateway.redis_facade import str_redis
from gateway.server import serve
from orchestrator.demo.spec import DATASET_REPO, KB_REPO, POOL, Roster, model_served
from orchestrator.demo.steps import DemoPolicy
from orchestrator.demo.upstream import DemoUpstream, serving
from orchestrator.local.embedded_redis import EmbeddedRedis, EmbeddedRedisError
from orchestrator.local.launcher import LLM_URL_ENV, LaunchError, ensure_operator_token, llm_settings
from orchestrator.spec import SwarmSpec
from orchestrator.supervisor.main import Supervisor


@dataclass(frozen=True)
class Running:
    """What the demo's driver gets: where the gateway is, the operator's token, who is in the swarm."""

    home: Path
    url: str
    socket: Path
    operator_token: str
    spec: SwarmSpec
    roster: Roster
    backend: str
    warnings: tuple[str, ...]


def demo_pools(executor: str) -> list[PoolConfig]:
    """One ``cpu`` pool: two job slots on this machine, 5 minutes per job. Its worker reads each job's
    task from the dataset repo's protected main (seeded from the catalogue), so the regression cases
    the red team adds there are run by every later job (issue 27)."""
    node = NodeConfig(name="local", devices=[0, 1])
    return [
        PoolConfig(
            name=POOL,
            device="cpu",
            executor=executor,
            nodes=[node],
            timeout_s=300,
        )
    ]


def demo_plugins(lead: str, executor: str, llm: LLMProxySettings) -> list[Plugin[Any]]:
    """The gateway's registered components, with the demo's settings for the ones it configures."""
    from gateway.forge.plugin import ForgePlugin
    from gateway.forge.settings import ForgeSettings
    from gateway.jobs.plugin import JobsPlugin
    from gateway.jobs.settings import JobsSettings
    from gateway.kb.plugin import KBPlugin
    from gateway.kb.service import KBSettings
    from gateway.plugins import default_plugins, replace_plugins
    from gateway.tasks.models import TasksSettings
    from gateway.tasks.plugin import TasksPlugin

    return replace_plugins(
        default_plugins(llm),
        ForgePlugin(ForgeSettings(default_repo=DATASET_REPO, gate_sweep_s=5.0)),
        JobsPlugin(JobsSettings(pools=demo_pools(executor), default_repo=DATASET_REPO)),
        TasksPlugin(TasksSettings(dataset_repo=DATASET_REPO, leads=[lead])),
        KBPlugin(KBSettings(repo=KB_REPO)),
    )


class WorkerProcess:
    """``python -m orchestrator.worker`` for one pool, as the worker principal; stopped by pid."""

    def __init__(self, pool: str, url: str, token_file: Path, log: Path) -> None:
        self.pool, self.url, self.token_file, self.log = pool, url, token_file, log
        # Jobs run as another uid: their checkouts must be reachable, so not under a 0700 home.
        self.workdir = Path(tempfile.mkdtemp(prefix="kswarm-demo-jobs-"))
        self.workdir.chmod(0o711)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [sys.executable, "-m", "orchestrator.worker", "--pool", self.pool, "--gateway", self.url]
        argv += ["--token-file", str(self.token_file), "--workdir", str(self.workdir)]
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            env = scrub_env(os.environ)  # the worker never needs the model key
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)

    def stop(self, timeout: float = 15.0) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


async def worker_token(redis_url: str, swarm: str, name: str) -> str:
    redis = str_redis(Redis.from_url(redis_url, decode_responses=True))
    try:
        store = PrincipalStore(redis, swarm)
        _, token = await store.ensure(name, PrincipalKind.worker)
        return token or await store.issue_token(name)
    finally:
        await redis.aclose()


class DemoLauncher:
    """``await DemoLauncher(...).run(driver)``: start everything, run ``driver(running)``, then stop
    everything -- at once, or (``keep``) when the gateway is told to stop (Ctrl-C, ``kswarm down``)."""

    def __init__(
        self, home: Path, port: int, spec: SwarmSpec, roster: Roster, backend: str, keep: bool = False
    ) -> None:
        self.home, self.port, self.spec, self.roster, self.backend = home, port, spec, roster, backend
        self.keep = keep
        self.warnings: list[str] = []

    async def run(self, driver: Callable[[Running], Coroutine[Any, Any, int]]) -> int:
        async with contextlib.AsyncExitStack() as served:
            llm = await self._llm(served)
            return await self._run(driver, llm)

    async def _llm(self, stack: contextlib.AsyncExitStack) -> LLMProxySettings:
        """The proxy's settings; for a scripted swarm, the demo's model served behind it on loopback with
        a key of this run (``orchestrator.demo.upstream``), so that every model call is booked."""
        llm, _ = llm_settings(None)  # a bad KSWARM_LLM_* variable: one line (LaunchError), not a traceback
        if not model_served(self.spec):
            return llm
        if os.environ.get(LLM_URL_ENV):
            self.warnings.append(
                "the scripted demo serves its own model: --llm-url (KSWARM_LLM_URL) is unused"
            )
        key = f"sk-demo-{secrets.token_urlsafe(24)}"
        policy = DemoPolicy.from_env(self.spec.defaults.runtime.env)
        url = await stack.enter_async_context(serving(DemoUpstream(policy, key)))
        # Loopback: no HTTP(S)_PROXY of the environment may stand between the proxy and this model.
        return llm.model_copy(update={"upstream_url": url, "api_key": SecretStr(key), "trust_env": False})

    async def _run(self, driver: Callable[[Running], Coroutine[Any, Any, int]], llm: LLMProxySettings) -> int:
        with ExitStack() as outer:
            redis_url = os.environ.get("REDIS_URL") or self._embedded_redis(outer)
            settings = GatewaySettings(
                redis_url=redis_url, home=self.home, port=self.port, swarm=self.spec.swarm
            )
            token = await ensure_operator_token(redis_url, self.home, self.spec.swarm)
            executor = "docker" if self.backend == "docker" else "local"
            app = create_app(settings, plugins=demo_plugins(self.roster.lead, executor, llm))
            ready, stop = asyncio.Event(), asyncio.Event()
            server = asyncio.create_task(serve(app, settings, ready, stop))
            waiting = asyncio.create_task(ready.wait())
            await asyncio.wait([server, waiting], return_when=asyncio.FIRST_COMPLETED)
            if server.done():
                waiting.cancel()
                await server  # re-raises the start-up failure
                raise LaunchError("the gateway stopped during start-up")
            info = GatewayInfo(url=settings.url(), socket=str(settings.socket_path()), pid=os.getpid())
            info.write(self.home)
            outer.callback(lambda: (self.home / "gateway.json").unlink(missing_ok=True))
            code = 1
            inner = ExitStack()
            interrupted = asyncio.Event()
            self._take_signals(interrupted)
            try:
                inner.enter_context(self._supervise(settings, token))
                worker = await self._worker(redis_url, settings.url())
                inner.callback(worker.stop)
                running = Running(
                    self.home,
                    settings.url(),
                    settings.socket_path(),
                    token,
                    self.spec,
                    self.roster,
                    self.backend,
                    tuple(self.warnings),
                )
                flow = asyncio.create_task(driver(running))
                signalled = asyncio.create_task(interrupted.wait())
                await asyncio.wait([server, flow, signalled], return_when=asyncio.FIRST_COMPLETED)
                if flow.done() and not interrupted.is_set() and not server.done():
                    code = flow.result()
                    if self.keep:  # until Ctrl-C or `kswarm down` (SIGTERM)
                        await asyncio.wait([server, signalled], return_when=asyncio.FIRST_COMPLETED)
                else:
                    flow.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await flow
                    code = 130
                signalled.cancel()
            finally:
                # Stopping blocks (joins, waits for pids): off the loop, which still serves the gateway
                # that the supervisor and the agents talk to while they stop; the gateway goes last.
                await asyncio.to_thread(inner.close)
                stop.set()
                with contextlib.suppress(asyncio.CancelledError):
                    await server
            return code

    @staticmethod
    def _take_signals(interrupted: asyncio.Event) -> None:
        """Ctrl-C and SIGTERM (``kswarm down``) stop the demo in order -- agents and worker before the
        gateway they talk to -- instead of stopping the gateway first, as uvicorn would."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, interrupted.set)

    def _embedded_redis(self, stack: ExitStack) -> str:
        embedded = EmbeddedRedis(self.home)
        try:
            url = embedded.ensure_running()
        except EmbeddedRedisError as exc:
            raise LaunchError(str(exc)) from exc
        stack.callback(embedded.release)
        return url

    async def _worker(self, redis_url: str, url: str) -> WorkerProcess:
        name = f"worker-{POOL}"
        token_file = self.home / "demo" / f"{name}.token"
        token_file.parent.mkdir(parents=True, exist_ok=True)
        write_secret(token_file, await worker_token(redis_url, self.spec.swarm, name))
        worker = WorkerProcess(POOL, url, token_file, self.home / "demo" / "logs" / f"{name}.log")
        worker.start()
        return worker

    @contextlib.contextmanager
    def _supervise(self, settings: GatewaySettings, token: str) -> Iterator[Supervisor]:
        """The reconcile loop in a thread; on the way out it stops, then every agent is stopped."""
        try:
            supervisor = Supervisor(
                spec=self.spec,
                backend=self.backend,
                home=self.home,
                gateway_url=settings.url(),
                operator_token=token,
                socket_path=settings.socket_path(),
            )
        except Exception as exc:  # e.g. no Docker daemon for --backend docker
            hint = " (is a Docker daemon up? set DOCKER_HOST)" if self.backend == "docker" else ""
            raise LaunchError(f"cannot start the {self.backend} backend{hint}: {exc}") from exc
        if supervisor.warning:
            self.warnings.append(supervisor.warning)
        stop = threading.Event()
        thread = threading.Thread(target=supervisor.run, args=(stop,), name="supervisor", daemon=True)
        thread.start()
        try:
            yield supervisor
        finally:
            stop.set()
            thread.join(timeout=60)
            supervisor.shutdown(purge=False)
