"""Plain functions over the Messages format (``agents/models``): rough token counts, content as
blocks, a conversation as text for a summariser. Shared by the history (compaction) and the models
(the scripted model answers summarisation requests like a real one)."""

from __future__ import annotations

import json
from typing import Any

from agents.models import Block, Message

SUMMARY_SYSTEM = (
    "You compact an agent's conversation. Summarise it for the same agent so it can continue its work: "
    "who asked what, what was done (files, commits, PRs, jobs, messages sent) and what is still open. "
    "Facts only, no speculation; at most 300 words."
)
BLOCK_CHARS = 600  # per block in the text given to the summariser


def estimate_tokens(*parts: Any) -> int:
    """About four characters per token of the JSON (a deliberately rough, tokenizer-free estimate)."""
    return sum(len(json.dumps(p, ensure_ascii=False, separators=(",", ":"))) for p in parts) // 4


def blocks(content: str | list[Block]) -> list[Block]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def render(messages: list[Message]) -> str:
    """The messages as plain text for the summariser; long blocks are cut."""
    out = []
    for m in messages:
        for b in blocks(m["content"]):
            kind = b.get("type")
            if kind == "text":
                body = f"{m['role']}: {b['text']}"
            elif kind == "tool_use":
                body = f"assistant called {b['name']}({json.dumps(b.get('input'), ensure_ascii=False)})"
            elif kind == "tool_result":
                content = b.get("content")
                text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
                body = f"tool result{' (error)' if b.get('is_error') else ''}: {text}"
            else:
                body = f"{m['role']}: [{kind}]"
            out.append(body if len(body) <= BLOCK_CHARS else body[:BLOCK_CHARS] + " [...]")
    return "\n".join(out)
