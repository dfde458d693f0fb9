"""Reading and scrubbing the upstream's bytes: the key out of every reply, the usage out of streams.

``KeyScrubber`` replaces the key in any byte stream; ``SSEUsage`` reads usage out of an Anthropic
SSE stream without changing it; ``SSEKeyScrubber`` keeps the key out of a streamed (SSE) reply,
even when the model spells it out.

A byte scrubber catches the key inside one event; a model that echoes the key in streamed text sends
it as several ``content_block_delta`` events, each holding a piece. So text deltas are scrubbed per
content block: the tail of a block's text that could begin the key is held back and sent with the
next delta of that block (or just before its ``content_block_stop``). Everything else passes
through byte-scrubbed. Events stay well-formed Anthropic SSE, so SDKs see nothing unusual.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.llm.books import Usage

REDACTED = "[redacted]"
DELTA_FIELDS = {"text_delta": "text", "input_json_delta": "partial_json", "thinking_delta": "thinking"}
MAX_SSE_LINE = 1 << 20  # usage events are small; longer lines are passed through unparsed


class KeyScrubber:
    """Replaces the key in a byte stream, also when it is split across chunks.

    Only a chunk's tail that could begin the key is held back, so SSE events (which end in a
    newline, never part of a key) are not delayed.
    """

    def __init__(self, secret: bytes | None) -> None:
        self.secret = secret or b""
        self.pending = b""

    def scrub(self, data: bytes) -> bytes:
        return data.replace(self.secret, REDACTED.encode()) if self.secret else data

    def feed(self, chunk: bytes) -> bytes:
        if not self.secret:
            return chunk
        data = (self.pending + chunk).replace(self.secret, REDACTED.encode())
        keep = 0
        for n in range(min(len(self.secret) - 1, len(data)), 0, -1):
            if data.endswith(self.secret[:n]):
                keep = n
                break
        self.pending = data[len(data) - keep :] if keep else b""
        return data[: len(data) - keep]

    def flush(self) -> bytes:
        out, self.pending = self.pending, b""
        return out


class SSEUsage:
    """Reads usage and model out of an Anthropic SSE stream without changing a byte of it.

    ``seen``: ``message_start`` arrived (it carries the input tokens); ``final``: a ``message_delta``
    with the final output count arrived; ``deltas``: content deltas so far (each carries at least
    one output token: what a stream cut before its final count is known to have produced);
    ``error``: the upstream sent an ``event: error``.
    """

    def __init__(self) -> None:
        self.usage = Usage()
        self.model: str | None = None
        self.seen = False
        self.final = False
        self.error = False
        self.deltas = 0
        self._line = b""

    def feed(self, chunk: bytes) -> None:
        lines = (self._line + chunk).split(b"\n")
        self._line = lines.pop()
        if len(self._line) > MAX_SSE_LINE:
            self._line = b""
        for line in lines:
            if line.startswith(b"data:"):
                if b'"message_start"' in line or b'"message_delta"' in line:
                    self._event(line[5:])
                elif b'"content_block_delta"' in line:
                    self.deltas += 1
            elif line.startswith(b"event:") and line[6:].strip() == b"error":
                self.error = True

    def _event(self, raw: bytes) -> None:
        try:
            event = json.loads(raw)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            self.seen = True
            model = event["message"].get("model")
            self.model = model if isinstance(model, str) and model else self.model
            self.usage.merge(event["message"].get("usage"))
            self.usage.reported.discard("output_tokens")  # message_start's output count is provisional
        elif kind == "message_delta":
            self.usage.merge(event.get("usage"))
            self.final = "output_tokens" in self.usage.reported
        elif kind == "content_block_delta":
            self.deltas += 1


def held_tail(text: str, secret: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``secret``: only a suffix
    that starts with the key's first character can be one, so only those are compared."""
    first = secret[:1]
    at = text.find(first, max(0, len(text) - len(secret) + 1)) if first else -1
    while at >= 0:
        if secret.startswith(text[at:]):
            return len(text) - at
        at = text.find(first, at + 1)
    return 0


class SSEKeyScrubber:
    """``feed(chunk) -> bytes`` and ``flush() -> bytes`` over an Anthropic SSE byte stream."""

    def __init__(self, secret: bytes | None) -> None:
        self.secret = (secret or b"").decode()
        self.buffer = b""
        self.held: dict[int, tuple[str, str]] = {}  # block index -> (delta type, held text)

    def feed(self, chunk: bytes) -> bytes:
        if not self.secret:
            return chunk
        self.buffer += chunk
        out: list[bytes] = []
        while (end := self.buffer.find(b"\n\n")) >= 0:
            event, self.buffer = self.buffer[: end + 2], self.buffer[end + 2 :]
            out.append(self._event(event))
        return b"".join(out)

    def flush(self) -> bytes:
        rest, self.buffer = self.buffer, b""
        tails = [self._delta_event(i, kind, text) for i, (kind, text) in self.held.items() if text]
        self.held.clear()
        return b"".join(tails) + self._bytes(rest)

    def _bytes(self, data: bytes) -> bytes:
        return data.replace(self.secret.encode(), REDACTED.encode()) if self.secret else data

    def _event(self, raw: bytes) -> bytes:
        # Only a content block's delta, or its stop while text of it is held, is rewritten; any other
        # event (the type is written as a JSON string: a quote follows it) is byte-scrubbed unparsed.
        if b'"content_block_delta"' not in raw and not (self.held and b'"content_block_stop"' in raw):
            return self._bytes(raw)
        lines = raw.decode(errors="replace").split("\n")
        data_at = next((i for i, line in enumerate(lines) if line.startswith("data:")), None)
        if data_at is None:
            return self._bytes(raw)
        try:
            payload: dict[str, Any] = json.loads(lines[data_at][5:])
        except ValueError:
            return self._bytes(raw)
        kind = payload.get("type")
        index = payload.get("index")
        if kind == "content_block_delta" and isinstance(index, int):
            delta = payload.get("delta") or {}
            field = DELTA_FIELDS.get(delta.get("type", ""))
            if field is not None and isinstance(delta.get(field), str):
                _, held = self.held.get(index, (delta["type"], ""))
                text = (held + delta[field]).replace(self.secret, REDACTED)
                keep = held_tail(text, self.secret)
                self.held[index] = (delta["type"], text[len(text) - keep :] if keep else "")
                if not keep and text == delta[field]:
                    return self._bytes(raw)  # nothing held before or now, no key in it: as it came
                delta[field] = text[: len(text) - keep]
                lines[data_at] = "data: " + json.dumps(payload)
                return "\n".join(lines).encode()
        if kind == "content_block_stop" and isinstance(index, int) and index in self.held:
            delta_kind, held = self.held.pop(index)
            return (self._delta_event(index, delta_kind, held) if held else b"") + self._bytes(raw)
        return self._bytes(raw)

    def _delta_event(self, index: int, kind: str, text: str) -> bytes:
        delta = {"type": kind, DELTA_FIELDS[kind]: text}
        payload = {"type": "content_block_delta", "index": index, "delta": delta}
        return b"event: content_block_delta\ndata: " + json.dumps(payload).encode() + b"\n\n"
