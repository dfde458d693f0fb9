"""Test support for the task board: a real gateway (uvicorn in a thread) with the forge and the board."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from gateway.forge.plugin import ForgePlugin
from gateway.forge.settings import ForgeSettings
from gateway.plugin import Plugin
from gateway.tasks.models import TasksSettings
from gateway.tasks.plugin import TasksPlugin
from kstest.gateway import GatewayThread

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "forge"))  # forgekit: git as an agent


class BoardGateway(GatewayThread):
    """A real gateway with the forge (gate off: these suites merge nothing) and the task board."""

    tokens: dict[str, str]
    tasks_settings: TasksSettings

    def plugins(self) -> list[Plugin[Any]]:
        return [ForgePlugin(ForgeSettings(gate_enabled=False)), TasksPlugin(self.tasks_settings)]


def post_task(gw: BoardGateway, task_id: str, **extra: object) -> dict[str, Any]:
    """The operator posts ``task_id`` (201 asserted); the task as the board answers it."""
    with gw.client(gw.operator_token) as op:
        reply = op.post("/api/tasks", json={"id": task_id, "title": f"do {task_id}", **extra})
    assert reply.status_code == 201, reply.text
    return dict(reply.json())
