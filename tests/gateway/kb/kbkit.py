"""Test support for the knowledge base: a real gateway with the forge, its gate, the board and the kb."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "forge"))  # forgekit: git and the forge API

from forgekit import ForgeGateway

from gateway.app import create_app
from gateway.forge.plugin import forge_plugin
from gateway.forge.settings import ForgeSettings
from gateway.kb.plugin import kb_plugin
from gateway.kb.service import KBSettings
from gateway.server import serve
from gateway.tasks.plugin import tasks_plugin


class KBGateway(ForgeGateway):
    """``ForgeGateway`` whose plugins are [forge (gate sweeping every 0.5 s), tasks, kb]."""

    def plugins(self) -> list[Any]:
        def forge(app: Any, ctx: Any, mcp: Any) -> Any:
            return forge_plugin(app, ctx, mcp, ForgeSettings(gate_sweep_s=0.5))

        def kb(app: Any, ctx: Any, mcp: Any) -> Any:
            return kb_plugin(app, ctx, mcp, KBSettings(ensure_on_start=True))

        return [forge, tasks_plugin, kb]

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

        self._thread = threading.Thread(target=run, name=f"kb-gateway-{self.port}", daemon=True)
        self._thread.start()
        if not started.wait(timeout) or failure:
            raise RuntimeError(f"gateway did not start: {failure!r}")
