"""The real model: the official ``anthropic`` SDK pointed at the gateway's LLM proxy.

The API key the SDK sends is the agent's own gateway token; the proxy swaps it for the real key.
Over the unix socket the SDK gets an ``httpx2`` client with a UDS transport and base URL
``http://kswarm``. The SDK retries 408/409/429/5xx itself; the proxy marks its budget refusals
``x-should-retry: false`` (and ``x-kswarm-budget-exhausted``), which become ``BudgetExhausted``.
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2

from agents.config import AgentConfig
from agents.models import Block, BudgetExhausted, Message, ModelError, ModelReply, ToolSpec, Usage

BUDGET_HEADER = "x-kswarm-budget-exhausted"


def http_client(config: AgentConfig, timeout: float = 600.0) -> httpx2.AsyncClient | None:
    """An httpx2 client over the gateway's unix socket, or None for TCP (the SDK's own client)."""
    if config.gateway_socket is None:
        return None
    transport = httpx2.AsyncHTTPTransport(uds=str(config.gateway_socket))
    return httpx2.AsyncClient(transport=transport, timeout=timeout)


def block_dict(block: Any) -> Block:
    """An SDK content block as the plain dict the loop and transcript use."""
    if block.type == "text":
        return {"type": "text", "text": block.text}
    if block.type == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    return block.model_dump(mode="json", exclude_none=True)


def usage_of(raw: Any) -> Usage:
    if raw is None:
        return Usage()
    return Usage(
        input_tokens=raw.input_tokens or 0,
        output_tokens=raw.output_tokens or 0,
        cache_creation_input_tokens=getattr(raw, "cache_creation_input_tokens", None) or 0,
        cache_read_input_tokens=getattr(raw, "cache_read_input_tokens", None) or 0,
    )


def is_budget_refusal(exc: anthropic.APIStatusError) -> bool:
    if exc.response.headers.get(BUDGET_HEADER):
        return True
    return exc.status_code == 429 and "budget exhausted" in str(exc.message).lower()


class AnthropicModel:
    """``Model`` over the Anthropic Messages API (through the gateway's proxy)."""

    def __init__(self, config: AgentConfig, max_retries: int = 4) -> None:
        self.name = config.model
        self.stream = config.stream
        self.client = anthropic.AsyncAnthropic(
            api_key=config.secret(),
            base_url=config.base_url(),
            http_client=http_client(config),
            max_retries=max_retries,
        )

    async def complete(
        self, system: str, messages: list[Message], tools: list[ToolSpec], max_tokens: int
    ) -> ModelReply:
        kwargs: dict[str, Any] = {
            "model": self.name,
            "max_tokens": max_tokens,
            "system": system,
            "messages": messages,
        }
        if tools:
            kwargs["tools"] = tools
        try:
            if self.stream:
                async with self.client.messages.stream(**kwargs) as stream:
                    message = await stream.get_final_message()
            else:
                message = await self.client.messages.create(**kwargs)
        except anthropic.APIStatusError as exc:
            if is_budget_refusal(exc):
                raise BudgetExhausted(str(exc.message), exc.status_code) from None
            raise ModelError(
                f"model request failed ({exc.status_code}): {exc.message}", exc.status_code
            ) from None
        except anthropic.APIConnectionError as exc:
            raise ModelError(f"model unreachable: {exc}") from None
        return ModelReply(
            content=[block_dict(b) for b in message.content],
            stop_reason=message.stop_reason,
            usage=usage_of(message.usage),
            model=message.model,
        )

    async def aclose(self) -> None:
        await self.client.close()
