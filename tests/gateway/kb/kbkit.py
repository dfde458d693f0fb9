"""Test support for the knowledge base: a real gateway with the forge, its gate, the board and the kb."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "forge"))  # forgekit: git and the forge API

from forgekit import ForgeGateway

from gateway.forge.plugin import forge_plugin
from gateway.forge.settings import ForgeSettings
from gateway.kb.plugin import kb_plugin
from gateway.kb.service import KBSettings
from gateway.tasks.plugin import tasks_plugin


class KBGateway(ForgeGateway):
    """``ForgeGateway`` whose plugins are [forge (gate sweeping every 0.5 s), tasks, kb]."""

    def plugins(self) -> list[Any]:
        def forge(app: Any, ctx: Any, mcp: Any) -> Any:
            return forge_plugin(app, ctx, mcp, ForgeSettings(gate_sweep_s=0.5))

        def kb(app: Any, ctx: Any, mcp: Any) -> Any:
            return kb_plugin(app, ctx, mcp, KBSettings(ensure_on_start=True))

        return [forge, tasks_plugin, kb]
