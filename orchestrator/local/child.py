"""The orchestrator as a child process of ``kswarm up -f``, kept running and stopped in order.

``OrchestratorChild`` starts ``python -m orchestrator.supervisor -f SPEC --workers
--stop-swarm-on-exit`` tethered to this process (``orchestrator.local.tether``: a ``kill -9`` of
``kswarm up`` takes it and its job workers down, while the agents keep running for the next ``up`` to
adopt). If it exits on its own it is started again after a backoff (1 s, doubling up to 30 s; a run of
a minute forgets the failures). ``stop()`` sends SIGTERM -- the orchestrator then stops the agents, then
the workers, and exits -- and ``force()`` a second one (it kills instead of waiting).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gateway.llm.config import scrub_env
from orchestrator.local.tether import tethered

BACKOFF_MAX_S = 30.0
STABLE_AFTER_S = 60.0


class OrchestratorChild:
    def __init__(
        self,
        home: Path,
        spec_path: Path,
        backend: str,
        gateway_url: str,
        socket: Path,
        redis_url: str,
        say: Callable[[str], None],
    ) -> None:
        self.home, self.spec_path, self.backend = home, spec_path, backend
        self.gateway_url, self.socket, self.redis_url = gateway_url, socket, redis_url
        self.say = say
        self.proc: asyncio.subprocess.Process | None = None
        self.stopping = False
        self._task: asyncio.Task[None] | None = None

    def argv(self) -> list[str]:
        argv = [sys.executable, "-m", "orchestrator.supervisor", "-f", str(self.spec_path)]
        argv += ["--backend", self.backend, "--socket", str(self.socket), "--redis-url", self.redis_url]
        argv += ["--workers", "--stop-swarm-on-exit", "--log-level", "WARNING"]
        argv += ["--log-file", str(self.home / "swarm" / "logs" / "orchestrator.log")]
        return tethered(os.getpid(), argv)

    def env(self) -> dict[str, str]:
        """Ours without model keys; the operator token comes from the home's file, not from here."""
        env = scrub_env(os.environ)
        for var in ("KSWARM_TOKEN", "KSWARM_OPERATOR_TOKEN"):
            env.pop(var, None)
        env.update(KSWARM_HOME=str(self.home), KSWARM_URL=self.gateway_url)
        return env

    async def _spawn(self) -> asyncio.subprocess.Process:
        # Its own process group: a Ctrl-C in the terminal reaches us, and we stop it in order.
        return await asyncio.create_subprocess_exec(
            *self.argv(), stdin=asyncio.subprocess.DEVNULL, env=self.env(), start_new_session=True
        )

    async def start(self) -> None:
        """Start it, and keep it running in the background until ``stop()``."""
        self.proc = await self._spawn()
        self._task = asyncio.create_task(self._keep_running(), name="kswarm-orchestrator")

    async def _keep_running(self) -> None:
        failures = 0
        while True:
            assert self.proc is not None
            began = time.monotonic()
            code = await self.proc.wait()
            if self.stopping:
                return
            failures = 1 if time.monotonic() - began > STABLE_AFTER_S else failures + 1
            delay = min(BACKOFF_MAX_S, 2.0 ** (failures - 1))
            self.say(f"the orchestrator exited (status {code}); starting it again in {delay:g} s")
            await asyncio.sleep(delay)
            if self.stopping:
                return
            self.proc = await self._spawn()

    def _signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    async def stop(self, force: asyncio.Event, grace_s: float = 60.0) -> bool:
        """SIGTERM (agents, then workers, then it exits); ``force`` set meanwhile: a second SIGTERM,
        so it kills them instead. Past ``grace_s`` it is killed. True if it stopped by itself."""
        self.stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.proc is None or self.proc.returncode is not None:
            return True
        self._signal(signal.SIGTERM)
        waiting = asyncio.create_task(self.proc.wait())
        forced = asyncio.create_task(force.wait())
        try:
            done, _ = await asyncio.wait([waiting, forced], timeout=grace_s, return_when="FIRST_COMPLETED")
            if waiting not in done and forced in done:
                self._signal(signal.SIGTERM)  # the second signal: kill, do not wait
                done, _ = await asyncio.wait([waiting], timeout=15.0)
            if waiting in done:
                return True
            self._signal(signal.SIGKILL)
            await self.proc.wait()
            return False
        finally:
            forced.cancel()
