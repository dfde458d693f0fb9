"""Test support for the task board: a real gateway (uvicorn in a thread) with the forge and the board."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from gateway.forge.plugin import forge_plugin
from gateway.forge.settings import ForgeSettings
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
