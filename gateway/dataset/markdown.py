"""Untrusted text in the dataset card: one escape for every value that is not the card's own words.

Task ids, kernel paths, agent names, model names, verdicts and flags reach the card from agents (a path
is any name git accepts; a harness record is shaped by the kernel it ran), so each goes through
``md_text`` (or ``md_code``) before it is written into ``README.md``. The escape keeps a value on its
line and in its table cell, and keeps it text: no HTML, no heading, no link, no emphasis, no code span.
"""

from __future__ import annotations

import re
from typing import Any

# Markdown's inline punctuation (CommonMark lets any ASCII punctuation be backslash-escaped): code
# spans, emphasis, links and images, table cells, headings, strikethrough, math ($ on Hugging Face).
_PUNCTUATION = re.compile(r"([\\`*_\[\]|#~$!])")
# A value that starts a line could open a block: a list, a quote, a setext underline, a numbered list.
_BLOCK_START = re.compile(r"^([-+=>]|\d+[.)])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u0085\u2028\u2029]")
_SAFE_CODE = re.compile(r"[A-Za-z0-9._/:@+-]{1,200}")


def md_text(value: Any) -> str:
    """``value`` as inline Markdown text, safe in a table cell and anywhere within a line: line breaks
    and control characters become spaces, ``& < >`` HTML entities, Markdown punctuation escaped."""
    text = " ".join(_CONTROL.sub(" ", str(value)).split())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _PUNCTUATION.sub(r"\\\1", text)
    return _BLOCK_START.sub(r"\\\1", text)


def md_code(value: Any) -> str:
    """``value`` as a code span when it is plain (a path or id of ordinary characters), else as
    ``md_text``: a backtick or ``|`` cannot be escaped inside a code span."""
    text = str(value)
    return f"`{text}`" if _SAFE_CODE.fullmatch(text) else md_text(text)
