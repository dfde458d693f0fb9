"""Test support for the task board: a real gateway (uvicorn in a thread) with the forge and the board."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path
from typing import Any

from gateway.app import create_app
from gateway.forge.plugin import forge_plugin
from gateway.forge.settings import ForgeSettings
from gateway.server import serve
from gateway.tasks.models import TasksSettings
from gateway.tasks.plugin import tasks_plugin
from kstest.gateway import GatewayThread

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "forge"))  # forgekit: git as an agent


class BoardGateway(GatewayThread):
    """A real gateway with the forge (gate off: these suites merge nothing) and the task board."""

    tokens: dict[str, str]
    tasks_settings: TasksSettings

    def plugins(self) -> list[Any]:
        def forge(app: Any, ctx: Any, mcp: Any) -> Any:
            return forge_plugin(app, ctx, mcp, ForgeSettings(gate_enabled=False))

        def tasks(app: Any, ctx: Any, mcp: Any) -> Any:
            return tasks_plugin(app, ctx, mcp, self.tasks_settings)

        return [forge, tasks]

    def start(self, timeout: float = 30) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        started = threading.Event()
        failure: list[BaseException] = []

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            ready = asyncio.Event()
            self.app = create_app(self.settings, plugins=self.plugins())
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

        self._thread = threading.Thread(target=run, name=f"board-gateway-{self.port}", daemon=True)
        self._thread.start()
        if not started.wait(timeout) or failure:
            raise RuntimeError(f"gateway did not start: {failure!r}")
