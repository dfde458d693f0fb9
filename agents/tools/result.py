"""What a tool call gives back to the model, and how long outputs are cut."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ToolResult:
    """The text the model sees as the ``tool_result``; ``is_error`` marks a failed call."""

    text: str
    is_error: bool = False


def truncate(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, keeping the head and the tail, with a note."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    cut = len(text) - head - tail
    note = f"\n[... {cut} characters cut: output truncated to {limit} of {len(text)} characters ...]\n"
    return text[:head] + note + text[len(text) - tail :]
