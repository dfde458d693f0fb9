"""Passages and BM25 ranking for the knowledge base: pure Python, no model, no downloads.

A note is split into passages at headings and blank lines (a fenced code block stays whole, with the
paragraph before it when that paragraph introduces it). Each passage is indexed with its heading path
and file name, so "masking" finds a paragraph under "## Masking" even when the word is not repeated.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

TOKEN_RE = re.compile(r"[a-z0-9]+")
HEADING_RE = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE_RE = re.compile(r"^\s*(```|~~~)")
MAX_PASSAGE_CHARS = 2000
# Words too common in these notes to rank anything.
STOPWORDS = frozenset(
    "a an and are as at be by do for from how i if in is it its of on or so that the this to was "
    "what when where which with you your".split()
)


def _stem(token: str) -> str:
    """A light plural fold, so "masks" finds "mask" (and "passes" stays "passes")."""
    if len(token) > 3 and token.endswith("s") and not token.endswith(("ss", "us", "is")):
        return token[:-1]
    return token


def tokens(text: str) -> list[str]:
    """Lower-case alphanumeric runs, plurals folded; ``tl.program_id`` gives ``tl``, ``program``, ``id``."""
    return [_stem(t) for t in TOKEN_RE.findall(text.lower()) if t not in STOPWORDS]


@dataclass(frozen=True)
class Passage:
    file: str
    line: int  # 1-based first line in the file
    heading: str  # "Title > Section"
    text: str


def split_passages(path: str, text: str) -> list[Passage]:
    """Passages of a Markdown (or plain text) note."""
    out: list[Passage] = []
    headings: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 1
    in_fence = False

    def flush() -> None:
        body = "\n".join(buf).strip()
        if body:
            heading = " > ".join(h for _, h in headings)
            for i in range(0, len(body), MAX_PASSAGE_CHARS):
                out.append(Passage(path, start, heading, body[i : i + MAX_PASSAGE_CHARS]))
        buf.clear()

    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE_RE.match(line):
            if not in_fence and buf and not buf[-1].rstrip().endswith(":"):
                flush()
            if not buf:
                start = number
            buf.append(line)
            in_fence = not in_fence
            continue
        if in_fence:
            buf.append(line)
            continue
        heading = HEADING_RE.match(line)
        if heading:
            flush()
            level = len(heading.group(1))
            headings[:] = [h for h in headings if h[0] < level] + [(level, heading.group(2))]
            continue
        if not line.strip():
            flush()
            continue
        if not buf:
            start = number
        buf.append(line)
    flush()
    return out


@dataclass
class Bm25Index:
    """Okapi BM25 (k1 = 1.5, b = 0.75) over passages."""

    passages: list[Passage]
    k1: float = 1.5
    b: float = 0.75
    _tf: list[Counter[str]] = field(default_factory=list, repr=False)
    _len: list[int] = field(default_factory=list, repr=False)
    _df: Counter[str] = field(default_factory=Counter, repr=False)

    def __post_init__(self) -> None:
        for p in self.passages:
            name = p.file.rsplit("/", 1)[-1].rsplit(".", 1)[0]
            terms = tokens(p.text) + tokens(p.heading) * 2 + tokens(name)
            tf = Counter(terms)
            self._tf.append(tf)
            self._len.append(len(terms))
            self._df.update(tf.keys())

    @property
    def avg_len(self) -> float:
        return (sum(self._len) / len(self._len)) if self._len else 0.0

    def idf(self, term: str) -> float:
        n, df = len(self.passages), self._df.get(term, 0)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def search(self, query: str, limit: int = 5) -> list[tuple[float, Passage]]:
        terms = set(tokens(query))
        if not terms or not self.passages:
            return []
        avg = self.avg_len or 1.0
        scored: list[tuple[float, int]] = []
        for i, tf in enumerate(self._tf):
            score = 0.0
            norm = self.k1 * (1.0 - self.b + self.b * self._len[i] / avg)
            for term in terms:
                f = tf.get(term)
                if f:
                    score += self.idf(term) * f * (self.k1 + 1.0) / (f + norm)
            if score > 0:
                scored.append((score, i))
        scored.sort(key=lambda s: (-s[0], self.passages[s[1]].file, self.passages[s[1]].line))
        return [(round(score, 4), self.passages[i]) for score, i in scored[:limit]]
