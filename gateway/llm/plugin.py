"""``LLMProxyPlugin`` (``llm``): the LLM proxy's ``/v1/messages`` routes, ``/api/usage`` and ``llm_usage``.

Provides the proxy and its usage store. Settings default to ``KSWARM_LLM_*`` (and ``ANTHROPIC_API_KEY``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from gateway.context import GatewayContext
from gateway.llm.config import LLMProxySettings
from gateway.llm.proxy import LLMProxy
from gateway.llm.usage_api import usage_router, usage_tools
from gateway.plugin import Contribution, Plugin
from gateway.services import LLM_PROXY, LLM_USAGE, MONITOR, TASK_BOARD

# The proxied Anthropic API. The proxy is looked up, not injected: this is the hottest route of all.
proxy_router = APIRouter()


def _proxy(request: Request) -> LLMProxy:
    return request.app.state.ctx.services.get(LLM_PROXY)


@proxy_router.post("/v1/messages", summary="Anthropic Messages API, proxied with the real key (agents)")
async def messages(request: Request) -> Response:
    return await _proxy(request).forward(request, billed=True)


@proxy_router.post(
    "/v1/messages/count_tokens",
    summary="Anthropic token counting, proxied (agents): not billed, but budget-checked and slotted",
)
async def count_tokens(request: Request) -> Response:
    return await _proxy(request).forward(request, billed=False)


class LLMProxyPlugin(Plugin[LLMProxySettings]):
    name = "llm"
    settings_model = LLMProxySettings
    provides = (LLM_PROXY, LLM_USAGE)

    def contribute(self, ctx: GatewayContext) -> Contribution:
        proxy = LLMProxy(ctx, self.settings)

        async def held(name: str) -> list[str] | None:
            """The tasks ``name`` holds a claim on now: what its spending is booked to (cost per task);
            None when no monitor books cost per task (then nothing is logged)."""
            if ctx.services.find(MONITOR) is None:
                return None
            board = ctx.services.find(TASK_BOARD)
            return await board.board.held_by(name) if board is not None else []

        proxy.usage.holdings = held
        return Contribution(
            services={LLM_PROXY: proxy, LLM_USAGE: proxy.usage},
            routers=[usage_router],
            hot_routers=[proxy_router],
            tools=usage_tools(proxy.usage),
            lifespan=proxy.lifespan,
        )
