"""A person's search text as a safe FTS5 query, plus the filters typed inline.

``softmax "tile size" tl.dot* from:dev-1 in:general kind:pr`` -> terms ``"softmax" "tile size" "tl" "dot"*``
(every term must match; quoted text is a phrase; a trailing ``*`` matches a prefix) and the filters
sender ``dev-1``, channel ``general``, kind ``pr``. Each term is an FTS5 string (quotes doubled), so
nothing typed is ever FTS5 syntax: no column filters, NEAR, operators or unbalanced quotes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gateway.errors import BadRequest

TOKEN_RE = re.compile(r'"([^"]*)"|(\S+)')
WORD_RE = re.compile(r"\w+", re.UNICODE)
FILTERS = {"from": "sender", "in": "channel", "kind": "kind"}
MAX_TERMS = 16


@dataclass
class ParsedQuery:
    fts: str
    terms: list[str] = field(default_factory=list)
    sender: str | None = None
    channel: str | None = None
    kind: str | None = None


def _quoted(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def parse_query(text: str) -> ParsedQuery:
    """Raises BadRequest when nothing searchable is left."""
    parts: list[str] = []
    terms: list[str] = []
    filters: dict[str, str] = {}
    for match in TOKEN_RE.finditer(text.strip()):
        phrase, word = match.group(1), match.group(2)
        if word and ":" in word and word.split(":", 1)[0] in FILTERS and word.split(":", 1)[1]:
            key, value = word.split(":", 1)
            filters[FILTERS[key]] = value
            continue
        if phrase is not None:
            words = WORD_RE.findall(phrase)
            if words:
                parts.append(_quoted(" ".join(words)))
                terms.append(" ".join(words))
            continue
        prefix = word.endswith("*")
        words = WORD_RE.findall(word)
        for i, w in enumerate(words):
            star = "*" if prefix and i == len(words) - 1 else ""
            parts.append(_quoted(w) + star)
            terms.append(w)
    if len(parts) > MAX_TERMS:
        raise BadRequest(f"at most {MAX_TERMS} search terms")
    if not parts:
        raise BadRequest("empty search query: give at least one word")
    return ParsedQuery(fts=" ".join(parts), terms=terms, **filters)
