"""The transcript (append-only JSONL), the conversation context (saved across restarts), compaction.

``transcript.jsonl`` in the history dir gets one JSON object per line, each with ``ts`` and ``type``:
``start``, ``wake`` (the events), ``request`` (model, max_tokens, ``messages_new`` = the context from
``from_index`` on that no earlier record holds, the system prompt and tools when they changed, the
estimated context size),
``response`` (content blocks, stop_reason, usage, latency), ``tool_call``, ``tool_result``,
``compaction`` (the summary and the context that replaced the old one), ``stop`` (why a wake ended)
and ``error``. Replaying ``request``/``compaction`` records rebuilds every request exactly.

``context.json`` holds the current messages, rewritten atomically after every step, so a restarted
agent continues the same conversation. Compaction: see ``Context.compact`` and docs/agents.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.models import Block, Message, Model, ToolSpec, Usage
from agents.models.conversation import SUMMARY_SYSTEM, blocks, estimate_tokens, render

SUMMARY_MARK = "[Summary of the earlier conversation"
INTERRUPTED = "not run: the agent stopped (restart, budget or error) before running this call"


def has_tool_results(message: Message) -> bool:
    return message["role"] == "user" and any(
        b.get("type") == "tool_result" for b in blocks(message["content"])
    )


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class Transcript:
    """Append-only JSONL log of everything the agent sent to and got from its model and tools.

    ``sink`` (the timeline reporter) is handed every record after it is written; it must not raise."""

    def __init__(self, history_dir: Path, sink: Callable[[dict[str, Any]], None] | None = None) -> None:
        history_dir.mkdir(parents=True, exist_ok=True)
        self.path = history_dir / "transcript.jsonl"
        self.system_sha: str | None = None
        self.tool_names: list[str] | None = None
        self.sink = sink

    def write(self, type_: str, **fields: Any) -> None:
        record = {"ts": time.time(), "type": type_, **fields}
        with open(self.path, "a") as fh:
            fh.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        if self.sink is not None:
            self.sink(record)

    def request(
        self,
        model: str,
        system: str,
        new: tuple[int, list[Message]],
        n: int,
        tools: list[ToolSpec],
        **extra: Any,
    ) -> None:
        fields: dict[str, Any] = {
            "model": model,
            "from_index": new[0],
            "messages_new": new[1],
            "n_messages": n,
        }
        fields.update(extra)
        sha = hashlib.sha256(system.encode()).hexdigest()[:16]
        fields["system_sha"] = sha
        if sha != self.system_sha:
            fields["system"] = system
            self.system_sha = sha
        names = [t["name"] for t in tools]
        if names != self.tool_names:
            fields["tools"] = tools
            self.tool_names = names
        self.write("request", **fields)

    def records(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]


class Context:
    """The messages sent to the model, persisted in ``context.json`` after every change."""

    def __init__(self, history_dir: Path, persist: bool = True) -> None:
        history_dir.mkdir(parents=True, exist_ok=True)
        self.path = history_dir / "context.json"
        self.persist = persist
        self.messages: list[Message] = []
        self.logged = 0  # messages already written to the transcript in a request record
        self.usage_hint = 0  # tokens the upstream counted for the last request (0 after compaction)
        if persist and self.path.exists():
            data = json.loads(self.path.read_text())
            self.messages = data.get("messages", [])

    def save(self) -> None:
        if self.persist:
            atomic_write(self.path, json.dumps({"messages": self.messages}, ensure_ascii=False))

    def unlogged(self) -> tuple[int, list[Message]]:
        """(index, messages) not yet in a request record; replay: ``context[index:] = messages``."""
        start, new = self.logged, self.messages[self.logged :]
        self.logged = len(self.messages)
        return start, new

    # -- appending, keeping the alternation the API requires ---------------------------------

    def add_user(self, content: str | list[Block]) -> None:
        """Append user content; closes a dangling tool_use and merges into a trailing user message."""
        new = blocks(content)
        if self.messages and self.messages[-1]["role"] == "assistant":
            pending = [b for b in blocks(self.messages[-1]["content"]) if b.get("type") == "tool_use"]
            answered = {b.get("tool_use_id") for b in new if b.get("type") == "tool_result"}
            closing = [
                {"type": "tool_result", "tool_use_id": b["id"], "content": INTERRUPTED, "is_error": True}
                for b in pending
                if b["id"] not in answered
            ]
            new = closing + new
        if self.messages and self.messages[-1]["role"] == "user":
            self.messages[-1] = {"role": "user", "content": blocks(self.messages[-1]["content"]) + new}
            self.logged = min(self.logged, len(self.messages) - 1)
        else:
            self.messages.append({"role": "user", "content": new})
        self.save()

    def add_assistant(self, content: list[Block], usage: Usage | None = None) -> None:
        if self.messages and self.messages[-1]["role"] == "assistant":
            self.add_user([{"type": "text", "text": "(continue)"}])
        self.messages.append({"role": "assistant", "content": content or [{"type": "text", "text": "."}]})
        if usage is not None:
            self.usage_hint = usage.total
        self.save()

    def tokens(self, system: str, tools: list[ToolSpec]) -> int:
        return max(estimate_tokens(system, self.messages, tools), self.usage_hint)

    # -- compaction --------------------------------------------------------------------------

    def cut_point(self, keep: int) -> int:
        """Index of the first kept message: an assistant message, or a user one without tool results
        (a kept tool_result must keep its tool_use). 0 = nothing worth compacting."""
        return self._back_off(len(self.messages) - keep)

    def _back_off(self, j: int) -> int:
        while j > 0 and has_tool_results(self.messages[j]):
            j -= 1
        return max(j, 0)

    def wake_start(self) -> int:
        """Index of the user message that opened the current wake (the last one with words in it)."""
        for i in range(len(self.messages) - 1, -1, -1):
            m = self.messages[i]
            if m["role"] == "user" and any(b.get("type") == "text" for b in blocks(m["content"])):
                return i
        return 0

    async def compact(self, model: Model, keep: int, max_tokens: int, transcript: Transcript) -> bool:
        """Summarise the older messages with the model, keeping the last ``keep``; True if it did.

        The cut never falls inside the current wake while older wakes remain to be summarised; when
        the current wake alone is the context, it is cut too and the wake's words (the events) are
        carried into the first kept message, so the model still knows what it was woken for."""
        w = self.wake_start()
        j = self._back_off(min(self.cut_point(keep), w))
        carried: list[Block] = []
        if j < 2:
            j = self.cut_point(keep)
            if j < 2:
                return False
            opening = blocks(self.messages[w]["content"])
            carried = [
                b for b in opening if b.get("type") == "text" and not b["text"].startswith(SUMMARY_MARK)
            ]
        old, kept = self.messages[:j], self.messages[j:]
        request = [{"role": "user", "content": render(old) + "\n\nSummarise the conversation above."}]
        reply = await model.complete(SUMMARY_SYSTEM, request, [], max_tokens=min(max_tokens, 2048))
        summary = reply.text().strip() or "(the summariser returned nothing)"
        note = {"type": "text", "text": f"{SUMMARY_MARK} ({len(old)} messages compacted)]\n{summary}"}
        if kept[0]["role"] == "user":
            kept = [{"role": "user", "content": [note, *carried, *blocks(kept[0]["content"])]}, *kept[1:]]
        else:
            kept = [{"role": "user", "content": [note, *carried]}, *kept]
        self.messages = kept
        self.usage_hint = 0
        self.logged = len(self.messages)
        self.save()
        transcript.write(
            "compaction",
            summarised=len(old),
            kept=len(kept),
            summary=summary,
            usage=reply.usage.as_dict(),
            messages=self.messages,
        )
        return True
