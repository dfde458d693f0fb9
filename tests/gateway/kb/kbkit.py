"""Test support for the knowledge base: a real gateway with the forge, its gate, the board and the kb."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "forge"))  # forgekit: git and the forge API

from forgekit import ForgeGateway

from gateway.forge.plugin import ForgePlugin
from gateway.forge.settings import ForgeSettings
from gateway.kb.plugin import KBPlugin
from gateway.kb.service import KBSettings
from gateway.plugin import Plugin
from gateway.tasks.plugin import TasksPlugin


class KBGateway(ForgeGateway):
    """``ForgeGateway`` whose plugins are [forge (gate sweeping every 0.5 s), tasks, kb]."""

    def plugins(self) -> list[Plugin[Any]]:
        forge = ForgePlugin(ForgeSettings(gate_sweep_s=0.5))
        return [forge, TasksPlugin(), KBPlugin(KBSettings(ensure_on_start=True))]
