"""The official MCP client against a gateway, over TCP or the unix socket."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client


@asynccontextmanager
async def mcp_session(url: str, token: str, uds: Path | None = None) -> AsyncIterator[ClientSession]:
    """An initialised session; ``uds`` connects through the unix socket (as agent containers do)."""
    transport = httpx2.AsyncHTTPTransport(uds=str(uds)) if uds else None
    base = "http://kswarm" if uds else url
    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"}, transport=transport, timeout=60
        ) as http,
        streamable_http_client(f"{base}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> Any:
    """Call a tool; return its structured result, or raise ToolFailed with the error text."""
    result = await session.call_tool(tool, arguments)
    if result.is_error:
        raise ToolFailed(" ".join(getattr(c, "text", "") for c in result.content))
    if result.structured_content is not None:
        content = result.structured_content
        return content.get("result", content) if set(content) == {"result"} else content
    return json.loads(result.content[0].text) if result.content else None


class ToolFailed(Exception):
    pass
