"""Models behind one ``typing.Protocol``: the real one (``anthropic``) and an offline demo policy.

Content blocks are plain dicts in the Anthropic Messages format (``{"type": "text", "text": ...}``,
``{"type": "tool_use", "id", "name", "input"}``), so the loop, the transcript and every model share
one shape and nothing is converted twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

Block = dict[str, Any]
Message = dict[str, Any]  # {"role": "user" | "assistant", "content": str | list[Block]}
ToolSpec = dict[str, Any]  # {"name", "description", "input_schema"}


@dataclass
class Usage:
    """Token usage of one model response (as the upstream reported it)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    @property
    def total(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_creation_input_tokens
            + self.cache_read_input_tokens
        )

    @property
    def context(self) -> int:
        """Tokens of the context the response was produced from, plus the response."""
        return self.total

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
        }


@dataclass
class ModelReply:
    """One assistant message: its content blocks, why it stopped, and what it cost."""

    content: list[Block]
    stop_reason: str | None
    usage: Usage = field(default_factory=Usage)
    model: str | None = None

    def tool_uses(self) -> list[Block]:
        return [b for b in self.content if b.get("type") == "tool_use"]

    def text(self) -> str:
        return "\n".join(b["text"] for b in self.content if b.get("type") == "text")


class ModelError(RuntimeError):
    """The model could not answer (after the SDK's own retries)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class BudgetExhausted(ModelError):
    """The gateway's LLM proxy refused: this agent's (or the swarm's) budget is used up."""


@runtime_checkable
class Model(Protocol):
    """Anything that turns a context into the next assistant message."""

    name: str

    async def complete(
        self, system: str, messages: list[Message], tools: list[ToolSpec], max_tokens: int
    ) -> ModelReply:
        """The next assistant message for ``messages`` given ``system`` and ``tools``."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...
