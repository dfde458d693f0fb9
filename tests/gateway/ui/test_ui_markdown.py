"""Markdown from agents, rendered safely (markdown-it-py without raw HTML, then nh3), with PRs, job ids
and shas linked — attacked as an agent would: HTML in a chat message and in a PR body, checked by
executing the page in a real browser, and the usual XSS vectors through the renderer itself."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest
from ui_kit import UiGateway, browser_page, shot

from gateway.ui.markdown import ALLOWED_TAGS, MarkdownRenderer, linkify_plain, sanitize

PAYLOADS = [
    "<script>window.__pwned = 'script'</script>",
    "<img src=x onerror=\"window.__pwned = 'img'\">",
    "<svg onload=\"window.__pwned = 'svg'\"></svg>",
    "[click](javascript:window.__pwned='js-link')",
    "[click](JaVaScRiPt:window.__pwned='js-link-case')",
    "![x](javascript:window.__pwned='js-image')",
    "<a href=\"javascript:window.__pwned='raw-a'\">raw</a>",
    "<iframe src=\"javascript:window.__pwned='iframe'\"></iframe>",
    "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    '<div style="background:url(javascript:alert(1))">styled</div>',
    "```html\n<script>window.__pwned='fenced'</script>\n```",
    "`<img src=x onerror=alert(1)>`",
    "<details open ontoggle=\"window.__pwned='details'\">x</details>",
]


@pytest.fixture(scope="module")
def md() -> MarkdownRenderer:
    return MarkdownRenderer()


class Elements(HTMLParser):
    """Every element and attribute of a piece of HTML, as a browser's parser would see them."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.found: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, attrs))


@pytest.mark.parametrize("payload", PAYLOADS)
def test_html_in_markdown_is_inert(md: MarkdownRenderer, payload: str) -> None:
    html = md.html(payload)
    for tag, attrs in Elements(html).found:
        assert tag in ALLOWED_TAGS, html
        for name, value in attrs:
            assert not name.startswith("on") and name != "style", html
            if name == "href":
                assert (value or "").split(":")[0].lower() in ("http", "https", "mailto") or (
                    value or ""
                ).startswith("/ui/"), html


def test_the_sanitiser_alone_stops_what_a_renderer_bug_would_let_through() -> None:
    """The second layer: nh3 drops scripts, handlers, images and javascript: URLs from any HTML."""
    raw = (
        '<p onclick="x()">a</p><script>x()</script><img src=x onerror=x()>'
        '<a href="javascript:x()">l</a><a href="/ui/jobs/j0123456789ab" onmouseover="x()">ok</a>'
    )
    clean = sanitize(raw)
    assert "script" not in clean and "<img" not in clean and "onclick" not in clean
    assert "onmouseover" not in clean and "javascript:" not in clean
    assert 'href="/ui/jobs/j0123456789ab"' in clean


def test_markdown_and_references_render(md: MarkdownRenderer) -> None:
    html = md.html(
        "**failed** on `softmax`: see #12 and kswarm/kernels#3, job j0123456789abcdef at 1a2b3c4d; "
        "[docs](https://example.org/x)",
        None,
    )
    assert "<strong>failed</strong>" in html and "<code>softmax</code>" in html
    assert '<a href="/ui/pr/12" class="ref ref-pr"' in html
    assert '<a href="/ui/prs/kswarm/kernels/3" class="ref ref-pr"' in html
    assert '<a href="/ui/jobs/j0123456789abcdef" class="ref ref-job"' in html
    assert '<a href="/ui/commit/1a2b3c4d" class="ref ref-sha"' in html
    assert 'href="https://example.org/x"' in html and 'rel="noopener noreferrer nofollow"' in html
    # Not references: inside code, a word that is only hex letters, a number, an issue in a URL.
    quiet = md.html("`#12` and deadbeef and 1234567 and https://example.org/a#12")
    assert "ref-" not in quiet


def test_mentions_only_those_the_server_validated(md: MarkdownRenderer) -> None:
    from gateway.ui.markdown import LinkContext

    html = md.html("@dev-1 and @nobody", LinkContext(mentions=("dev-1",), me="dev-1"))
    assert '<span class="mention mention-me">@dev-1</span>' in html and "@nobody" in html
    assert html.count("mention") == 2  # one span: class "mention mention-me"


def test_plain_text_is_escaped_and_linked() -> None:
    out = str(linkify_plain("<b>x</b> merged #4 at 0f1e2d3c4b"))
    assert "&lt;b&gt;x&lt;/b&gt;" in out and "<b>" not in out
    assert 'href="/ui/pr/4"' in out and 'href="/ui/commit/0f1e2d3c4b"' in out


def test_agent_html_is_inert_in_the_browser(ui_gateway: UiGateway, chromium: Path, short_tmp: Path) -> None:
    """Executed, not grepped: an agent posts every payload in #general and opens a PR whose body holds
    them; the chat and the PR page run no script of theirs and show no image."""
    from git_kit import open_demo_pr

    dev = ui_gateway.add_principal("dev-1")
    with ui_gateway.client(dev) as agent:
        for payload in PAYLOADS:
            assert agent.post("/api/channels/general/messages", json={"text": payload}).status_code == 201
    number = open_demo_pr(ui_gateway, short_tmp, dev, body="\n\n".join(PAYLOADS))
    with browser_page(ui_gateway) as page:
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(f"{ui_gateway.url}/ui/chat?c=general")
        page.wait_for_selector("#messages article.msg")
        assert page.locator("#messages article.msg").count() >= len(PAYLOADS)
        for link in page.locator("#messages .md a").all():
            link.click(modifiers=["Control"], no_wait_after=True)  # a javascript: link would run here
        assert page.evaluate("window.__pwned") is None
        assert page.locator("#messages .md img, #messages .md script, #messages .md svg").count() == 0
        assert "window.__pwned = 'script'" in page.locator("#messages").inner_text()  # shown as text
        shot(page, "markdown-attack-chat")
        page.goto(f"{ui_gateway.url}/ui/prs/kswarm/kernels/{number}")
        page.wait_for_selector("#pr-body")
        assert page.evaluate("window.__pwned") is None
        assert page.locator("#pr-body img, #pr-body script, #pr-body iframe, #pr-body svg").count() == 0
        assert "<script>" in page.locator("#pr-body").inner_text()
        shot(page, "markdown-attack-pr")
    assert dialogs == []
