"""The streamed-reply scrubber: the key never survives, however the text and the bytes are cut."""

from __future__ import annotations

import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.llm.sse_scrub import SSEKeyScrubber

KEY = "sk-ant-REAL-KEY-0123456789"


def stream(text: str, cuts: list[int]) -> bytes:
    """An Anthropic-style SSE stream whose text block arrives in pieces cut at ``cuts``."""
    events = [{"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 1}}}]
    events.append({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
    bounds = [0, *sorted({c % (len(text) + 1) for c in cuts}), len(text)]
    for a, b in itertools.pairwise(bounds):
        if b > a:
            events.append(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": text[a:b]},
                }
            )
    events += [{"type": "content_block_stop", "index": 0}, {"type": "message_stop"}]
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def text_of(raw: bytes) -> str:
    out = ""
    for block in raw.decode().split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data:"):
                event = json.loads(line[5:])
                if event["type"] == "content_block_delta":
                    out += event["delta"]["text"]
    return out


@settings(max_examples=200, deadline=None)
@given(
    text_cuts=st.lists(st.integers(min_value=0, max_value=60), max_size=12),
    byte_cuts=st.lists(st.integers(min_value=1, max_value=400), max_size=8),
)
def test_key_never_survives_any_cutting(text_cuts: list[int], byte_cuts: list[int]) -> None:
    raw = stream(f"I saw {KEY} and {KEY[:5]} only", text_cuts)
    scrubber = SSEKeyScrubber(KEY.encode())
    out, at = b"", 0
    for cut in sorted(set(byte_cuts)):
        out += scrubber.feed(raw[at:cut])
        at = max(at, cut)
    out += scrubber.feed(raw[at:]) + scrubber.flush()
    assert KEY.encode() not in out
    assert text_of(out) == f"I saw [redacted] and {KEY[:5]} only", (
        "only the key changes; a prefix alone is kept"
    )


def test_without_a_key_the_stream_is_untouched() -> None:
    raw = stream("hello", [2])
    scrubber = SSEKeyScrubber(None)
    assert scrubber.feed(raw) + scrubber.flush() == raw


def test_a_key_spelled_with_json_escapes_is_caught_too() -> None:
    """The model's text arrives as JSON: ``\\u0052`` is an ``R``. An event passes through unchanged
    only when its decoded text holds nothing of the key, so escapes do not smuggle it out."""
    raw = stream(f"here: {KEY} done", [9, 20]).replace(b"REAL", b"\\u0052EAL")
    assert KEY.encode() not in raw
    scrubber = SSEKeyScrubber(KEY.encode())
    out = scrubber.feed(raw) + scrubber.flush()
    assert KEY not in text_of(out)
    assert text_of(out) == "here: [redacted] done"


def test_events_without_key_text_pass_through_byte_for_byte() -> None:
    """Events that hold nothing of the key leave as they came (no re-encoding of the JSON)."""
    raw = stream("plain text with no secret in it", [5, 11])
    scrubber = SSEKeyScrubber(KEY.encode())
    assert scrubber.feed(raw) + scrubber.flush() == raw
