"""Control characters: the one definition every process uses.

The gateway refuses them in text it accepts (``gateway.input_text``); the CLI and the agent's timeline
show the ones they meet as visible escapes (``visible``). Only the standard library: agents import it.
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, and the C1 controls (0x9b is a CSI on its own): what a terminal
# acts on instead of showing. ``\r`` is among them: it rewrites the line a reader sees.
CONTROL_CHARS = "\x00-\x08\x0b-\x1f\x7f-\x9f"
# The bidirectional overrides and marks: text that reads other than it is (shown, not refused).
BIDI_CHARS = "\u200e\u200f\u202a-\u202e\u2066-\u2069"
CONTROL = re.compile(f"[{CONTROL_CHARS}]")
CONTROL_OR_BIDI = re.compile(f"[{CONTROL_CHARS}{BIDI_CHARS}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str, bidi: bool = True) -> str:
    """``text`` with each control character (and bidi override, with ``bidi``) shown as its escape:
    ESC becomes the four characters ``\\x1b``."""
    return (CONTROL_OR_BIDI if bidi else CONTROL).sub(_escape, text)
