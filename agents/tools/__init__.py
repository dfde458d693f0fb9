"""The agent's tools: the gateway's MCP tools plus local tools confined to its work and memory dirs.

``Toolbox`` is what the loop sees: one list of Anthropic tool definitions and one ``call``. A local
tool wins a name clash (the MCP one is skipped with a warning), so the gateway cannot shadow
``bash`` or the file tools.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from agents.tools.local import LocalTools
from agents.tools.result import ToolResult, truncate

log = logging.getLogger("kswarm.agent.tools")

__all__ = ["LocalTools", "RemoteTools", "ToolResult", "Toolbox", "truncate"]


class RemoteTools(Protocol):
    """The MCP side (``agents.tools.mcp.McpTools``, or a stand-in in unit tests)."""

    def specs(self) -> list[dict[str, Any]]: ...

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult: ...


class Toolbox:
    """Local tools and remote (MCP) tools behind one name space."""

    def __init__(self, local: LocalTools, remote: RemoteTools | None = None) -> None:
        self.local = local
        self.remote = remote
        local_names = {s["name"] for s in local.specs()}
        self.remote_specs = []
        for spec in remote.specs() if remote else []:
            if spec["name"] in local_names:
                log.warning("MCP tool %s shadows a local tool; the local one is kept", spec["name"])
                continue
            self.remote_specs.append(spec)
        self.remote_names = {s["name"] for s in self.remote_specs}

    def specs(self) -> list[dict[str, Any]]:
        return self.remote_specs + self.local.specs()

    def names(self) -> list[str]:
        return [s["name"] for s in self.specs()]

    async def call(self, name: str, arguments: Any) -> ToolResult:
        if not isinstance(arguments, dict):
            return ToolResult(f"tool {name}: input must be a JSON object", is_error=True)
        if name in self.local.handlers:
            return await self.local.call(name, arguments)
        if name in self.remote_names and self.remote is not None:
            return await self.remote.call(name, arguments)
        return ToolResult(f"unknown tool {name!r}; available: {', '.join(self.names())}", is_error=True)
