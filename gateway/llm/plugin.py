"""``LLMProxyPlugin`` (``llm``): the LLM proxy's ``/v1/messages`` routes, ``/api/usage`` and ``llm_usage``.

Provides the proxy and its usage store. Settings default to ``KSWARM_LLM_*`` (and ``ANTHROPIC_API_KEY``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.context import GatewayContext
from gateway.llm.config import LLMProxySettings
from gateway.llm.proxy import LLMProxy
from gateway.llm.usage_api import usage_router, usage_tools
from gateway.plugin import Contribution, Door, Plugin
from gateway.services import LLM_PROXY, LLM_USAGE, MONITOR, TASK_BOARD

# The proxied Anthropic API. The proxy is looked up, not injected: this is the hottest route of all.
# POSTs to these paths are served by the plugin's doors (``proxy_door``), before the app's middleware
# stack; the routes stay for the OpenAPI document and answer what the doors do not take.
proxy_router = APIRouter()
POST = frozenset({"POST"})


def _proxy(request: Request) -> LLMProxy:
    return request.app.state.ctx.services.get(LLM_PROXY)


def proxy_door(proxy: LLMProxy, billed: bool) -> ASGIApp:
    """``forward`` as a bare ASGI app: it answers every outcome itself (refusals, upstream errors)."""

    async def door(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            response = await proxy.forward(Request(scope, receive), billed=billed)
        except ClientDisconnect:  # gone before its body was read: nobody to answer
            return
        await response(scope, receive, send)

    return door


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
            doors=[
                Door("/v1/messages", proxy_door(proxy, billed=True), POST),
                Door("/v1/messages/count_tokens", proxy_door(proxy, billed=False), POST),
            ],
            tools=usage_tools(proxy.usage),
            lifespan=proxy.lifespan,
        )
