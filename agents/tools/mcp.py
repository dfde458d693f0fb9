"""The gateway's MCP tools, discovered with ``tools/list`` and proxied 1:1 to the model.

One MCP session (official ``mcp`` client, streamable HTTP, bearer = the agent's token) over TCP or the
gateway's unix socket. The gateway's MCP endpoint is stateless, so a session lost to a gateway
restart is simply reopened and the call retried once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from contextlib import AsyncExitStack
from typing import Any

import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from agents.config import AgentConfig
from agents.tools.result import ToolResult, truncate

log = logging.getLogger("kswarm.agent.mcp")

# Closing the session ends it at the gateway (an HTTP DELETE): on the way out that gets a few seconds,
# not the client's two minutes for a tool call, so a slow or stopping gateway cannot hold a stopping
# agent (seen in CI: SIGTERM, then more than 10 s in the session's close).
CLOSE_S = 3.0


def result_text(result: Any) -> str:
    """A ``CallToolResult`` as the text the model sees: structured JSON, else the text parts."""
    if not result.is_error and result.structured_content is not None:
        content = result.structured_content
        if isinstance(content, dict) and set(content) == {"result"}:
            content = content["result"]
        return json.dumps(content, ensure_ascii=False)
    parts = [getattr(c, "text", None) or f"[{getattr(c, 'type', 'content')}]" for c in result.content]
    return "\n".join(parts)


def never_sent(exc: BaseException) -> bool:
    """True when ``exc`` (or one it wraps) is a failure to connect, so the request never arrived."""
    seen: list[BaseException] = [exc]
    visited: set[int] = set()
    while seen:
        current = seen.pop()
        if id(current) in visited:
            continue
        visited.add(id(current))
        if isinstance(current, httpx2.ConnectError | ConnectionRefusedError | FileNotFoundError):
            return True
        if isinstance(current, BaseExceptionGroup):
            seen.extend(current.exceptions)
        for nested in (current.__cause__, current.__context__):
            if nested is not None:
                seen.append(nested)
    return False


class McpTools:
    """An open MCP session to the gateway; ``specs`` are the tools it listed at start."""

    def __init__(self, config: AgentConfig, output_limit: int = 16_000, timeout: float = 120.0) -> None:
        self.config = config
        self.limit = output_limit
        self.timeout = timeout
        self.session: ClientSession | None = None
        self.stack: AsyncExitStack | None = None
        self.tools: list[dict[str, Any]] = []

    async def __aenter__(self) -> McpTools:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        # Where and as whom from the one client package; the MCP SDK brings its own HTTP client.
        target = self.config.gateway_target()
        transport = httpx2.AsyncHTTPTransport(uds=str(target.socket)) if target.socket else None
        stack = AsyncExitStack()
        try:
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers=target.headers(), transport=transport, timeout=self.timeout)
            )
            read, write = await stack.enter_async_context(
                streamable_http_client(target.mcp_url(), http_client=http)
            )
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            listed = await session.list_tools()
        except BaseException:
            await stack.aclose()
            raise
        self.stack, self.session = stack, session
        self.tools = [
            {"name": t.name, "description": t.description or t.name, "input_schema": t.input_schema}
            for t in listed.tools
        ]

    async def close(self) -> None:
        stack, self.stack, self.session = self.stack, None, None
        if stack is not None:
            try:
                async with asyncio.timeout(CLOSE_S):
                    await stack.aclose()
            except Exception as exc:  # a dead or slow gateway must not stop the agent from shutting down
                log.debug("closing the MCP session: %r", exc)

    def specs(self) -> list[dict[str, Any]]:
        return [dict(t) for t in self.tools]

    def names(self) -> set[str]:
        return {t["name"] for t in self.tools}

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        for attempt in (1, 2):
            try:
                if self.session is None:
                    await self.open()
                assert self.session is not None
                result = await self.session.call_tool(name, arguments)
            except Exception as exc:
                await self.close()
                # Retried only when nothing reached the gateway: a tool like chat_post must not run twice.
                if attempt == 2 or not never_sent(exc):
                    return ToolResult(f"MCP tool {name} failed: {type(exc).__name__}: {exc}", is_error=True)
                continue
            return ToolResult(truncate(result_text(result), self.limit), is_error=bool(result.is_error))
        raise AssertionError("unreachable")
