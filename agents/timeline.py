"""The agent's timeline, reported to the gateway as it happens: what woke it, each model call, each tool
call with its arguments and a truncated result, compactions, errors, the end of each wake.

The transcript (``agents.history``) stays the complete local record; every record written to it is also
handed to ``TimelineReporter.record``, which turns it into a small entry (``to_entries``: long strings and
lists cut) and queues it. A background task posts the queue in batches to ``POST /api/timeline`` with
the agent's own token — the gateway files them under the token's principal, so an agent can only ever
write its own timeline. Reporting never blocks or breaks the agent: a gateway that is down or refuses is
retried with back-off, and past ``max_queue`` entries the oldest are dropped (and counted, and said so
in a ``note`` entry once the gateway answers again).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from typing import Any, Protocol

from agents.prompt import describe
from gateway.client import BadInput, GatewayCallError, visible

log = logging.getLogger("kswarm.agent.timeline")

MAX_STRING = 1_000
MAX_RESULT = 2_000
MAX_ITEMS = 40
MAX_EVENTS = 20


class TimelinePoster(Protocol):
    async def request(self, method: str, path: str, **kw: Any) -> Any: ...


def clip(value: Any, limit: int = MAX_STRING, depth: int = 0) -> Any:
    """``value`` with long strings and lists cut (JSON-able), so one entry stays small."""
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + f"… ({len(value) - limit} more characters)"
    if isinstance(value, dict):
        if depth > 4:
            return "{…}"
        return {str(k): clip(v, limit, depth + 1) for k, v in list(value.items())[:MAX_ITEMS]}
    if isinstance(value, list | tuple):
        if depth > 4:
            return ["…"]
        items = [clip(v, limit, depth + 1) for v in list(value)[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            items.append(f"… ({len(value) - MAX_ITEMS} more)")
        return items
    if value is None or isinstance(value, bool | int | float):
        return value
    return clip(str(value), limit, depth)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content or []:
        if isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return "\n".join(parts)


def _event_brief(event: dict[str, Any]) -> dict[str, Any]:
    keep = ("id", "reason", "kind", "sender", "channel", "message_id", "thread")
    return {k: event[k] for k in keep if k in event} | {"text": clip(str(event.get("text", "")), 300)}


def _model_entry(ts: float, model: Any, usage: Any, stop: Any, latency: Any, content: Any) -> dict[str, Any]:
    usage = usage if isinstance(usage, dict) else {}
    tools = [b.get("name") for b in content or [] if isinstance(b, dict) and b.get("type") == "tool_use"]
    tokens_in = int(usage.get("input_tokens") or 0)
    tokens_out = int(usage.get("output_tokens") or 0)
    latency_txt = f", {latency:.1f} s" if isinstance(latency, int | float) else ""
    summary = f"{model or 'model'}: {tokens_in} in / {tokens_out} out tokens, {stop or '?'}{latency_txt}"
    if tools:
        summary += f" -> {', '.join(str(t) for t in tools)}"
    return {
        "kind": "model",
        "ts": ts,
        "summary": summary,
        "data": {
            "model": model,
            "usage": {k: v for k, v in usage.items() if isinstance(v, int)},
            "stop_reason": stop,
            "latency_s": latency,
            "text": clip(_text_of(content), 800),
            "tool_uses": tools,
        },
    }


def _tool_call(ts: float, call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    return {
        "kind": "tool_call",
        "ts": ts,
        "call_id": str(call_id or "")[:100],
        "summary": str(name),
        "data": {"name": name, "input": clip(arguments)},
    }


def _tool_result(
    ts: float, call_id: Any, name: Any, content: Any, is_error: bool, seconds: Any
) -> dict[str, Any]:
    text = content if isinstance(content, str) else _text_of(content) or json.dumps(content, default=str)
    took = f" in {seconds:.1f} s" if isinstance(seconds, int | float) else ""
    return {
        "kind": "tool_result",
        "ts": ts,
        "call_id": str(call_id or "")[:100],
        "summary": f"{name or 'tool'} {'failed' if is_error else 'ok'}{took}",
        "data": {
            "name": name,
            "content": clip(text, MAX_RESULT),
            "is_error": bool(is_error),
            "seconds": seconds,
        },
    }


def _claude_event(ts: float, event: dict[str, Any]) -> list[dict[str, Any]]:
    """Claude Code's stream-json lines: its model turns, tool calls and results, and the final result."""
    kind = event.get("type")
    raw_message = event.get("message")
    message: dict[str, Any] = raw_message if isinstance(raw_message, dict) else {}
    raw_content = message.get("content")
    content: list[Any] = raw_content if isinstance(raw_content, list) else []
    out: list[dict[str, Any]] = []
    if kind == "assistant":
        out.append(
            _model_entry(
                ts, message.get("model"), message.get("usage"), message.get("stop_reason"), None, content
            )
        )
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                out.append(_tool_call(ts, block.get("id"), block.get("name"), block.get("input")))
    elif kind == "user":
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                out.append(
                    _tool_result(
                        ts,
                        block.get("tool_use_id"),
                        None,
                        block.get("content"),
                        bool(block.get("is_error")),
                        None,
                    )
                )
    elif kind == "result":
        cost = event.get("total_cost_usd")
        turns = event.get("num_turns", "?")
        out.append(
            {
                "kind": "note",
                "ts": ts,
                "summary": f"claude-code result: {event.get('subtype', '?')}, {turns} turn(s)"
                + (f", ${cost:.4f} (CLI estimate)" if isinstance(cost, int | float) else ""),
                "data": clip(
                    {k: event.get(k) for k in ("subtype", "num_turns", "duration_ms", "usage", "is_error")}
                ),
            }
        )
    return out


def to_entries(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The timeline entries of one transcript record (none for records only the transcript needs), with
    every control character shown as its escape: the gateway refuses them in text."""
    return [_shown(entry) for entry in _entries(record)]


def _shown(value: Any) -> Any:
    if isinstance(value, str):
        return visible(value, bidi=False)
    if isinstance(value, dict):
        return {_shown(k): _shown(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shown(v) for v in value]
    return value


def _entries(record: dict[str, Any]) -> list[dict[str, Any]]:
    ts = float(record.get("ts") or time.time())
    kind = record.get("type")
    if kind == "start":
        tools = record.get("tools") or []
        what = (
            f"model {record['model']}, {len(tools)} tools"
            if record.get("model")
            else record.get("runtime", "")
        )
        return [{"kind": "start", "ts": ts, "summary": f"started: {what}", "data": clip({"tools": tools})}]
    if kind == "wake":
        events = [e for e in record.get("events") or [] if isinstance(e, dict)]
        summary = "; ".join(describe(e) for e in events[:3])
        data = {"events": [_event_brief(e) for e in events[:MAX_EVENTS]], "count": len(events)}
        return [
            {
                "kind": "wake",
                "ts": ts,
                "summary": clip(f"woken by {len(events)}: {summary}", 480),
                "data": data,
            }
        ]
    if kind == "response":
        return [
            _model_entry(
                ts, record.get("model"), record.get("usage"), record.get("stop_reason"),
                record.get("latency_s"), record.get("content"),
            )
        ]  # fmt: skip
    if kind == "tool_call":
        return [_tool_call(ts, record.get("id"), record.get("name"), record.get("input"))]
    if kind == "tool_result":
        return [
            _tool_result(
                ts, record.get("id"), record.get("name"), record.get("content"),
                bool(record.get("is_error")), record.get("seconds"),
            )
        ]  # fmt: skip
    if kind == "compaction":
        summary = f"compacted {record.get('summarised', '?')} messages, kept {record.get('kept', '?')}"
        data = {"summary": clip(str(record.get("summary", "")), MAX_RESULT), "usage": record.get("usage")}
        return [{"kind": "compaction", "ts": ts, "summary": summary, "data": data}]
    if kind == "error":
        what = f"{record.get('kind', 'error')}: {record.get('message', '')}"
        return [{"kind": "error", "ts": ts, "summary": clip(what, 480), "data": clip(dict(record))}]
    if kind == "stop":
        extra = (
            f" after {record['turns']} model call(s), {record.get('tokens', 0)} tokens"
            if "turns" in record
            else ""
        )
        data = clip({k: v for k, v in record.items() if k not in ("ts", "type")}, 500)
        return [
            {"kind": "stop", "ts": ts, "summary": f"wake ended: {record.get('reason')}{extra}", "data": data}
        ]
    if kind == "claude_event" and isinstance(record.get("event"), dict):
        return _claude_event(ts, record["event"])
    return []


class TimelineReporter:
    """Queues entries and posts them in the background; ``record`` never blocks and never raises."""

    def __init__(
        self, poster: TimelinePoster, max_queue: int = 2_000, batch: int = 50, flush_s: float = 0.3
    ) -> None:
        self.poster = poster
        self.queue: deque[dict[str, Any]] = deque()
        self.max_queue = max_queue
        self.batch = batch
        self.flush_s = flush_s
        self.dropped = 0
        self.sent = 0
        self.wakeup = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def record(self, record: dict[str, Any]) -> None:
        try:
            entries = to_entries(record)
        except Exception:  # a malformed record must not break the agent
            log.exception("timeline: could not summarise a %s record", record.get("type"))
            return
        for entry in entries:
            if len(self.queue) >= self.max_queue:
                self.queue.popleft()
                self.dropped += 1
            self.queue.append(entry)
        if entries:
            self.wakeup.set()

    async def __aenter__(self) -> TimelineReporter:
        self.task = asyncio.create_task(self._run(), name="timeline")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None
        with contextlib.suppress(Exception):  # a last, short try: the gateway may be gone
            await asyncio.wait_for(self.flush(), 2.0)

    async def flush(self) -> None:
        """Post everything queued (raises the client's error when the gateway refuses or is down)."""
        while self.queue:
            if self.dropped:
                note = f"{self.dropped} timeline entries were dropped while the gateway did not answer"
                self.queue.appendleft({"kind": "note", "ts": time.time(), "summary": note, "data": {}})
                self.dropped = 0
            chunk = [self.queue[i] for i in range(min(self.batch, len(self.queue)))]
            try:
                await self.poster.request("POST", "/api/timeline", json={"entries": chunk}, timeout=10)
            except BadInput as exc:  # one bad entry must not block the queue for ever: drop that batch
                log.warning("timeline: the gateway refused %d entries: %s", len(chunk), exc)
            for entry in chunk:  # by identity: entries dropped from the front meanwhile are gone already
                if self.queue and self.queue[0] is entry:
                    self.queue.popleft()
            self.sent += len(chunk)

    async def _run(self) -> None:
        delay = 0.5
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wakeup.wait(), 5.0)
            self.wakeup.clear()
            await asyncio.sleep(self.flush_s)  # let a burst (a model reply and its tool calls) batch up
            try:
                await self.flush()
                delay = 0.5
            except GatewayCallError as exc:
                log.debug("timeline: not reported yet (%s); retrying in %.1f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
                self.wakeup.set()
