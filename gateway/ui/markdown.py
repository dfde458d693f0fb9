"""Markdown from agents, rendered safely: markdown-it-py (raw HTML off), then nh3 (an allow-list sanitiser).

Everything an agent writes (messages, PR bodies, reviews, comments, task descriptions, timeline text) goes
through ``render_markdown``. Two independent layers keep agent HTML out of the operator's browser:

1. markdown-it-py with ``html: False``: a ``<script>`` or ``<img onerror=...>`` in the source is text, and
   its link validator refuses ``javascript:``/``vbscript:``/``data:`` URLs;
2. nh3 cleans the rendered HTML against an allow-list of tags, attributes and URL schemes, so even a bug
   in step 1 (or in our own token rules below) cannot emit an event handler, a script or an image.

On top of CommonMark the renderer links what a swarm talks about, outside code and existing links:
``#N`` and ``org/repo#N`` (PRs), job ids (``j`` + hex) and commit shas (7-40 hex digits with a digit and
a letter), and highlights the server-validated ``@mentions``. Fenced code is highlighted by Pygments
with CSS classes only (the page's CSP forbids inline styles).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import quote

import nh3
from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from markdown_it.token import Token
from markupsafe import Markup, escape
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

MAX_SOURCE = 200_000  # characters of one text rendered; the rest is cut (agents write it all)

ALLOWED_TAGS = {
    "a", "p", "br", "hr", "em", "strong", "del", "s", "code", "pre", "span", "blockquote",
    "ul", "ol", "li", "h1", "h2", "h3", "h4", "h5", "h6",
    "table", "thead", "tbody", "tr", "th", "td",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title", "class"},
    "span": {"class"},
    "code": {"class"},
    "pre": {"class"},
    "ol": {"start"},
}
URL_SCHEMES = {"http", "https", "mailto"}
LINK_REL = "noopener noreferrer nofollow"

# What gets linked: (optional org/repo)#N, job ids, shas, @mentions. One alternation, first match wins.
TOKEN_RE = re.compile(
    r"(?P<pr>(?<![\w/#&.:-])(?:(?P<repo>[A-Za-z0-9][\w.-]{0,63}/[A-Za-z0-9][\w.-]{0,99}))?#(?P<num>[1-9][0-9]{0,8})\b)"
    r"|(?P<job>(?<![\w/])j[0-9a-f]{12,24}(?![\w]))"
    r"|(?P<sha>(?<![\w/.-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w]))"
    r"|(?P<mention>(?<![\w@./-])@(?P<name>[a-z][a-z0-9-]{0,38})(?![\w-]))"
)


@dataclass(frozen=True)
class LinkContext:
    """Where the links point: ``repo`` (org/name) for bare ``#N`` and shas, when the text belongs to one
    (a PR page); else the UI's resolvers find the PR or commit. ``mentions``: the names the server
    validated for this message (only those are highlighted); ``me``: the viewer."""

    repo: str | None = None
    mentions: Sequence[str] = field(default_factory=tuple)
    me: str = ""


def pr_href(num: str, repo: str | None) -> str:
    if repo and "/" in repo:
        org, name = repo.split("/", 1)
        return f"/ui/prs/{quote(org, safe='')}/{quote(name, safe='')}/{num}"
    return f"/ui/pr/{num}"


def sha_href(sha: str, repo: str | None) -> str:
    if repo and "/" in repo:
        org, name = repo.split("/", 1)
        return f"/ui/commit/{quote(org, safe='')}/{quote(name, safe='')}/{sha}"
    return f"/ui/commit/{sha}"


def _link_tokens(
    text: str, ctx: LinkContext, make: Callable[[str, str, Literal[-1, 0, 1]], Token]
) -> list[Token] | None:
    """``text`` split into text and link/mention tokens, or None when nothing in it is linked."""
    out: list[Token] = []
    last = 0
    known = set(ctx.mentions)
    for match in TOKEN_RE.finditer(text):
        kind = match.lastgroup
        if kind == "mention" and match.group("name") not in known:
            continue
        if match.start() > last:
            piece = make("text", "", 0)
            piece.content = text[last : match.start()]
            out.append(piece)
        shown = match.group(0)
        if kind == "mention":
            name = match.group("name")
            opening = make("mention_open", "span", 1)
            opening.attrs = {"class": "mention mention-me" if name in (ctx.me, "all") else "mention"}
            closing = make("mention_close", "span", -1)
        else:
            if kind == "pr":
                href = pr_href(match.group("num"), match.group("repo") or ctx.repo)
                css = "ref ref-pr"
            elif kind == "job":
                href, css = f"/ui/jobs/{shown}", "ref ref-job"
            else:
                href, css = sha_href(shown, ctx.repo), "ref ref-sha"
            opening = make("link_open", "a", 1)
            opening.attrs = {"href": href, "class": css}
            closing = make("link_close", "a", -1)
        body = make("text", "", 0)
        body.content = shown
        out += [opening, body, closing]
        last = match.end()
    if not out:
        return None
    if last < len(text):
        tail = make("text", "", 0)
        tail.content = text[last:]
        out.append(tail)
    return out


def _highlight_code(code: str, lang: str, _attrs: object) -> str:
    """Fenced code with a known language, highlighted with CSS classes (``hl-*``); else escaped as is."""
    if not lang:
        return ""
    try:
        lexer = get_lexer_by_name(lang.split()[0], stripall=False)
    except ClassNotFound:
        return ""
    return highlight(code, lexer, HtmlFormatter(nowrap=True, classprefix="hl-"))


class MarkdownRenderer:
    """One markdown-it parser (CommonMark, tables, strikethrough, no raw HTML) plus the link rule."""

    def __init__(self) -> None:
        self.md = MarkdownIt("commonmark", {"html": False, "linkify": False, "highlight": _highlight_code})
        self.md.enable(["table", "strikethrough"])
        self.md.core.ruler.push("kswarm_links", self._links)

    def _links(self, state: StateCore) -> None:
        ctx: LinkContext = state.env.get("links", LinkContext())
        for block in state.tokens:
            if block.type != "inline" or not block.children:
                continue
            children: list[Token] = []
            in_link = 0
            for token in block.children:
                if token.type == "link_open":
                    in_link += 1
                elif token.type == "link_close":
                    in_link -= 1
                if token.type == "text" and not in_link:
                    replaced = _link_tokens(token.content, ctx, Token)
                    if replaced is not None:
                        children += replaced
                        continue
                children.append(token)
            block.children = children

    def html(self, text: str, ctx: LinkContext | None = None) -> str:
        source = text if len(text) <= MAX_SOURCE else text[:MAX_SOURCE] + "\n\n…(cut)"
        rendered = self.md.render(source, {"links": ctx or LinkContext()})
        return sanitize(rendered)

    def markup(
        self, text: str | None, repo: str | None = None, mentions: Sequence[str] = (), me: str = ""
    ) -> Markup:
        """``text`` (an agent's) as safe HTML for a template."""
        if not text:
            return Markup("")
        return Markup(self.html(text, LinkContext(repo=repo, mentions=tuple(mentions), me=me)))


def sanitize(html: str) -> str:
    """The allow-list pass: anything not listed (scripts, event handlers, images, styles) is dropped."""
    return nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes=URL_SCHEMES,
        link_rel=LINK_REL,
        strip_comments=True,
    )


def pygments_css() -> str:
    """The stylesheet of the ``hl-`` classes Pygments emits (code blocks and diffs)."""
    return HtmlFormatter(classprefix="hl-", style="default").get_style_defs("")


def linkify_plain(text: str | None, repo: str | None = None) -> Markup:
    """Plain text (a tool's output, a log line) escaped, with PRs, job ids and shas linked; no Markdown."""
    if not text:
        return Markup("")
    out: list[str] = []
    last = 0
    for match in TOKEN_RE.finditer(text):
        kind = match.lastgroup
        if kind == "mention":
            continue
        shown = match.group(0)
        if kind == "pr":
            href, css = pr_href(match.group("num"), match.group("repo") or repo), "ref ref-pr"
        elif kind == "job":
            href, css = f"/ui/jobs/{shown}", "ref ref-job"
        else:
            href, css = sha_href(shown, repo), "ref ref-sha"
        out.append(str(escape(text[last : match.start()])))
        out.append(f'<a href="{escape(href)}" class="{css}">{escape(shown)}</a>')
        last = match.end()
    out.append(str(escape(text[last:])))
    return Markup("".join(out))
