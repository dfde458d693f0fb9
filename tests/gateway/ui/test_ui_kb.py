"""The KB panel: the merged notes, a search box, one note rendered as sanitized markdown with its history.

Attack: a note whose path, text and commit message carry HTML and script (an agent writes notes; the gate
merges what was approved, not what is safe to paste into the operator's page) renders inert: no element or
handler of the attacker's reaches the page, over HTTP and in Chromium."""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.sync_api import expect
from ui_kit import UiGateway, browser_page, shot

from gateway.forge.seed import GATE
from gateway.services import FORGE

EVIL_PATH = 'notes/<img src=x onerror="window.pwned=1">.md'
EVIL_TEXT = (
    "# Tiling <script>window.pwned=2</script>\n\n"
    'Use BLOCK=128. <img src=x onerror="window.pwned=3"> [click](javascript:window.pwned=4)\n\n'
    "quokka-marker for search\n"
)
EVIL_MESSAGE = 'Add <script>window.pwned=5</script> note <b onmouseover="window.pwned=6">x</b>\n'
GOOD_PATH = "notes/plain.md"


def commit_note(gw: UiGateway, files: dict[str, bytes | None], message: str) -> str:
    """A commit on the kb's main as the gate (the one principal a protected branch takes commits from)."""
    assert gw.app is not None and gw._loop is not None
    forge = gw.app.state.ctx.services.get(FORGE)
    coro = forge.commit_files(GATE, "kswarm", "kb", "main", files, message)
    return str(asyncio.run_coroutine_threadsafe(coro, gw._loop).result(30))


@pytest.fixture
def kb_ui(ui_gateway: UiGateway) -> Iterator[UiGateway]:
    with ui_gateway.client(ui_gateway.operator_token) as op:
        assert op.post("/api/kb/seed").status_code == 200
        commit_note(ui_gateway, {GOOD_PATH: b"# Plain\n\nfirst words\n"}, "Add a plain note\n")
        commit_note(ui_gateway, {GOOD_PATH: b"# Plain\n\nsecond words\n"}, "Edit the plain note\n")
        commit_note(ui_gateway, {EVIL_PATH: EVIL_TEXT.encode()}, EVIL_MESSAGE)
        policy = {"required_approvals": 1, "human_approvals": 0, "required_checks": []}
        assert op.put("/api/forge/repos/kswarm/kb/policy", json=policy).status_code == 200
    yield ui_gateway


def no_attacker_markup(page: str) -> None:
    """No tag of the attacker's, no handler or script URL inside any tag (as escaped text they may stay)."""
    assert "<script>window" not in page and "<img" not in page and "<b " not in page, page[:3000]
    inside = re.findall(r"<[^>]*\b(?:on\w+=|javascript:)", page)
    assert not inside, inside


def test_kb_history_lists_the_commits_that_changed_a_note(kb_ui: UiGateway) -> None:
    with kb_ui.client(kb_ui.operator_token) as op:
        got = op.get(f"/api/kb/history/{GOOD_PATH}").json()
        other = op.get("/api/kb/history/notes/none.md").json()
    assert [(c["message"].strip(), c["change"]) for c in got["commits"]] == [
        ("Edit the plain note", "edited"),
        ("Add a plain note", "added"),
    ], got
    assert got["commits"][0]["author"] and got["commits"][0]["created"] > 0
    assert other["commits"] == []
    # A new head has its own history (what was read for the old one is not served again).
    commit_note(kb_ui, {GOOD_PATH: None}, "Remove the plain note\n")
    with kb_ui.client(kb_ui.operator_token) as op:
        again = op.get(f"/api/kb/history/{GOOD_PATH}").json()
    assert [c["change"] for c in again["commits"]] == ["removed", "edited", "added"], again


def test_kb_pages_list_search_and_render_a_note_inert(kb_ui: UiGateway) -> None:
    with kb_ui.login() as browser:
        listing = browser.get("/ui/kb").text
        assert 'id="nav-kb"' in listing and "notes/plain.md" in listing
        assert html.escape(EVIL_PATH, quote=False) in listing or "&lt;img" in listing
        no_attacker_markup(listing)
        found = browser.get("/ui/kb", params={"q": "quokka-marker"}).text
        assert re.search(r'<ol id="kb-results">.*?quokka-marker', found, re.S), found
        no_attacker_markup(found)
        note = browser.get(f"/ui/kb/{quote(EVIL_PATH)}")
        assert note.status_code == 200, note.text
        no_attacker_markup(note.text)
        assert "BLOCK=128" in note.text and "&lt;script&gt;window.pwned=5" in note.text
        plain = browser.get(f"/ui/kb/{GOOD_PATH}").text
        assert "second words" in plain and plain.count("/ui/commit/kswarm/kb/") >= 3
        assert browser.get("/ui/kb/notes/none.md").status_code == 404


def test_kb_page_in_chromium(kb_ui: UiGateway, chromium: Path) -> None:
    with browser_page(kb_ui) as page:
        page.click("#nav-kb")
        page.wait_for_url(re.compile(r".*/ui/kb$"))
        page.fill("#kb-search input[name=q]", "quokka-marker")
        page.click("#kb-search button")
        expect(page.locator("#kb-results li")).to_have_count(1)
        page.locator("#kb-results a").first.click()
        expect(page.locator("#kb-note")).to_contain_text("Use BLOCK=128.")
        expect(page.locator("#kb-history tbody tr")).to_have_count(1)
        expect(page.locator("#kb-history")).to_contain_text("<script>window.pwned=5</script>")
        page.hover("#kb-history")
        assert page.evaluate("window.pwned") is None
        assert page.locator("#kb-note img, #kb-note script, #panel script").count() == 0
        shot(page, "kb-note")
        page.goto(f"{kb_ui.url}/ui/kb")
        shot(page, "kb")
