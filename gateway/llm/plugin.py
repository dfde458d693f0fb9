"""``LLMProxyPlugin`` (``llm``): the LLM proxy's ``/v1/messages`` routes, ``/api/usage`` and ``llm_usage``.

Provides the proxy and its usage store. Settings default to ``KSWARM_LLM_*`` (and ``ANTHROPIC_API_KEY``).
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import Response

from gateway.context import GatewayContext
from gateway.llm.config import LLMProxySettings
from gateway.llm.proxy import LLMProxy
from gateway.llm.usage_api import build_usage_router, register_usage_tool
from gateway.mcp_server import GatewayMCP
from gateway.plugin import Lifespan, Plugin
from gateway.services import LLM_PROXY, LLM_USAGE, MONITOR, TASK_BOARD


class LLMProxyPlugin(Plugin[LLMProxySettings]):
    name = "llm"
    settings_model = LLMProxySettings
    provides = (LLM_PROXY, LLM_USAGE)

    def install(self, app: FastAPI, ctx: GatewayContext, mcp: GatewayMCP) -> Lifespan:
        proxy = LLMProxy(ctx, self.settings)
        ctx.services.provide(LLM_PROXY, proxy)

        async def held(name: str) -> list[str] | None:
            """The tasks ``name`` holds a claim on now: what its spending is booked to (cost per task);
            None when no monitor books cost per task (then nothing is logged)."""
            if ctx.services.find(MONITOR) is None:
                return None
            board = ctx.services.find(TASK_BOARD)
            return await board.board.held_by(name) if board is not None else []

        proxy.usage.holdings = held
        ctx.services.provide(LLM_USAGE, proxy.usage)

        @app.post("/v1/messages", summary="Anthropic Messages API, proxied with the real key (agents)")
        async def messages(request: Request) -> Response:
            return await proxy.forward(request, billed=True)

        @app.post(
            "/v1/messages/count_tokens",
            summary="Anthropic token counting, proxied (agents): not billed, but budget-checked and slotted",
        )
        async def count_tokens(request: Request) -> Response:
            return await proxy.forward(request, billed=False)

        app.include_router(build_usage_router(proxy.usage))
        register_usage_tool(mcp, proxy.usage)
        return proxy.lifespan
