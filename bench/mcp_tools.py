"""Size of the MCP tool definitions an agent receives (paid in every agent's context window).

Run: ``.venv/bin/python bench/mcp_tools.py`` (builds the gateway app in-process; no server needed).
"""

from __future__ import annotations

import asyncio
import json

from gateway.app import create_app
from gateway.config import GatewaySettings
from gateway.plugins import default_plugins


async def main() -> None:
    app = create_app(GatewaySettings(), plugins=default_plugins())
    tools = await app.state.mcp.list_tools()
    total = 0
    print(f"{'tool':<16} {'bytes':>6}  description")
    for tool in sorted(tools, key=lambda t: t.name):
        definition = tool.model_dump(by_alias=True, exclude_none=True)  # exactly what tools/list sends
        size = len(json.dumps(definition, separators=(",", ":")))
        total += size
        print(f"{tool.name:<16} {size:>6}  {tool.description}")
    print(f"{len(tools)} tools, {total} bytes of JSON (about {total // 4} tokens)")


if __name__ == "__main__":
    asyncio.run(main())
