"""Server-side rendering: the Jinja2 environment, its filters, and generic tables for JSON data.

Everything agents write (messages, PR text, diffs, memory) is untrusted: templates autoescape, Markdown
goes through ``gateway.ui.markdown`` (markdown-it-py without raw HTML, then the nh3 allow-list), diffs
through ``gateway.ui.diffs`` (escaped, highlighted with CSS classes), and the pages forbid inline scripts
and styles by CSP, so nothing an agent writes can run code in the operator's browser.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape

from gateway.chat import MENTION_RE
from gateway.ui.diffs import LineHighlighter, split_diff
from gateway.ui.markdown import MarkdownRenderer, linkify_plain

HERE = Path(__file__).parent
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
MAX_COLUMNS = 12
MAX_CELL = 160


def highlight_mentions(text: str, mentions: list[str], me: str = "") -> Markup:
    """Escape ``text`` and wrap the server-validated @mentions (the viewer's own: ``mention-me``)."""
    known = set(mentions)
    out: list[str] = []
    last = 0
    for match in MENTION_RE.finditer(text):
        name = match.group(1)
        if name not in known:
            continue
        out.append(str(escape(text[last : match.start()])))
        css = "mention mention-me" if name in (me, "all") else "mention"
        out.append(f'<span class="{css}">@{escape(name)}</span>')
        last = match.end()
    out.append(str(escape(text[last:])))
    return Markup("".join(out))


def age(ts: float | None, now: float | None = None) -> str:
    """``12s``, ``3.5m``, ``2.0h``, ``1.2d``; ``-`` for never."""
    if not ts:
        return "-"
    seconds = max(0.0, (now or time.time()) - ts)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def clock(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(ts)) if ts else "-"


def pretty(value: Any) -> str:
    """JSON for a <pre> (escaped by the template like any text)."""
    return json.dumps(value, indent=1, ensure_ascii=False, default=str)


def short_sha(value: Any) -> str:
    return str(value or "")[:10]


def usd(value: Any) -> str:
    """Dollars with the precision small amounts need."""
    if not isinstance(value, int | float):
        return "–"
    return f"${value:.2f}" if abs(value) >= 10 else f"${value:.4f}"


def number(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


def cell(value: Any) -> str:
    """One table cell: scalars as they are, anything nested as compact JSON, truncated."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e9 else clock(value)
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


@dataclass
class Table:
    """A generic table for JSON returned by a component's endpoint."""

    title: str
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)


def tabulate(title: str, data: Any) -> list[Table]:
    """Lists of objects become tables; objects become key/value tables and recurse into their lists."""
    if isinstance(data, list):
        dicts = [d for d in data if isinstance(d, dict)]
        if dicts and len(dicts) == len(data):
            columns: list[str] = []
            for d in dicts:
                columns += [k for k in d if k not in columns]
            columns = columns[:MAX_COLUMNS]
            return [Table(title, columns, [[cell(d.get(c)) for c in columns] for d in dicts])]
        return [Table(title, ["value"], [[cell(v)] for v in data])]
    if isinstance(data, dict):
        scalars = {k: v for k, v in data.items() if not isinstance(v, list | dict)}
        tables = (
            [Table(title, ["field", "value"], [[k, cell(v)] for k, v in scalars.items()])] if scalars else []
        )
        for key, value in data.items():
            if isinstance(value, list):
                tables += tabulate(f"{title} · {key}", value)
            elif isinstance(value, dict):
                nested = list(value.values())
                if nested and all(isinstance(v, dict) for v in nested):
                    rows = [{"name": k, **v} for k, v in value.items()]
                    tables += tabulate(f"{title} · {key}", rows)
                else:
                    tables += tabulate(f"{title} · {key}", value)
        return tables
    return [Table(title, ["value"], [[cell(data)]])]


def diff_lines(diff: str) -> list[tuple[str, str]]:
    """(css class, line) for a unified diff."""
    out = []
    for line in diff.splitlines():
        if line.startswith(("+++", "---", "diff ", "index ")):
            css = "d-file"
        elif line.startswith("@@"):
            css = "d-hunk"
        elif line.startswith("+"):
            css = "d-add"
        elif line.startswith("-"):
            css = "d-del"
        else:
            css = ""
        out.append((css, line))
    return out


class Renderer:
    """The templates of one app."""

    def __init__(self) -> None:
        self.env = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.markdown = MarkdownRenderer()
        self.highlighter = LineHighlighter()
        self.env.filters.update(
            age=age, clock=clock, number=number, cell=cell, short_sha=short_sha, usd=usd, pretty=pretty
        )
        self.env.globals.update(
            highlight_mentions=highlight_mentions,
            diff_lines=diff_lines,
            md=self.markdown.markup,
            linkify=linkify_plain,
            split_diff=lambda text: split_diff(text or "", self.highlighter),
        )

    def render(self, template: str, **context: Any) -> str:
        return self.env.get_template(template).render(now=time.time(), **context)

    def page(self, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(self.render(template, **context), status_code=status, headers=SECURITY_HEADERS)
