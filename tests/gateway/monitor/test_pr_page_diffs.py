"""The UI's PR page renders bounded diffs (issue 23): the PR's diff and each push's diff are cut while
they are read (a file over the per-file cap is never read, the page's push diffs share one budget), and
the page says what it left out. Attacked as a misbehaving agent would: alice pushes megabytes through
the gateway's git over HTTP with her own token, the operator opens the PR's page."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from monitor_kit import MonitorGateway, git, log_in, monitor_plugins, open_pr

from gateway.forge.plugin import ForgePlugin
from gateway.forge.settings import ForgeSettings
from gateway.plugin import Plugin
from kstest.waiting import wait_for

REPO = "kswarm/bigdiff"
REBASED = "kswarm/rebased"
CAP = 128 * 1024
FILE_CAP = 32 * 1024
LINE = "0123456789abcdef" * 4 + "\n"


class CappedGateway(MonitorGateway):
    def plugins(self) -> list[Plugin[Any]]:
        settings = ForgeSettings(gate_enabled=False, diff_max_bytes=CAP, diff_max_file_bytes=FILE_CAP)
        return monitor_plugins(None, ForgePlugin(settings))


@pytest.fixture
def capped_gw(clean_redis: str, short_tmp: Path) -> Iterator[CappedGateway]:
    gw = CappedGateway(short_tmp / "home", clean_redis)
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


def heads(gw: MonitorGateway, branch: str) -> list[str]:
    with gw.client(gw.operator_token) as op:
        got = op.get("/api/monitor/heads", params={"repo": REPO, "branch": branch}).json()
    return [h["sha"] for h in got]


def pr_state(gw: MonitorGateway, number: int) -> str:
    with gw.client(gw.operator_token) as op:
        reply = op.get(f"/api/forge/repos/{REBASED}/pulls/{number}")
    assert reply.status_code == 200, reply.text
    return str(reply.json()["state"])


def page(gw: MonitorGateway, number: int) -> str:
    with httpx.Client(base_url=gw.url, timeout=60) as browser:
        log_in(gw, browser)
        reply = browser.get(f"/ui/prs/{REPO}/{number}", headers={"Accept": "text/html"})
    assert reply.status_code == 200, reply.text
    return reply.text


def test_attack_a_pr_of_megabytes_renders_a_bounded_page(capped_gw: CappedGateway, short_tmp: Path) -> None:
    gw = capped_gw
    alice = gw.add_principal("alice")
    number, first = open_pr(gw, short_tmp, alice, "alice", REPO, "kernels/t/alice_k.py")
    work = short_tmp / "work-alice-kernels-t-alice_k.py"
    (work / "data").mkdir()
    (work / "data" / "huge.txt").write_text(LINE * (4_000_000 // len(LINE)))  # under the 4 MiB push limit
    (work / "kernels" / "t" / "blank.py").write_text("\n" * 20_000)  # a 20 KB blob, a 40 KB diff
    for i in range(300):
        (work / "kernels" / "t" / f"k{i:03}.py").write_text(f"def kernel_{i}(x):\n" + f"    x += {i}\n" * 80)
    home = short_tmp / "git-home"
    git(home, alice, "alice", "add", "-A", cwd=work)
    git(home, alice, "alice", "commit", "-q", "-m", "megabytes", cwd=work)
    git(home, alice, "alice", "push", "-q", "origin", "alice/alice_k", cwd=work)
    second = git(home, alice, "alice", "rev-parse", "HEAD", cwd=work).strip()
    wait_for(lambda: heads(gw, "alice/alice_k") == [first, second], what="both pushes recorded")

    html = page(gw, number)
    assert LINE.strip()[:40] not in html, "the 4 MB file's lines reached the page"
    # the PR's diff and the second push's diff each name both big files as too large
    assert html.count("file diff too large, ") >= 4
    assert html.count("diff cut at ") == 1  # the PR's diff: over the total cap
    assert "more file(s) not shown" in html  # the push's: over the files a push diff shows
    assert html.count('data-path="kernels/t/k007.py"') == 2  # small files are shown, in both diffs
    assert len(html.encode()) < 40 * CAP, len(html.encode())  # the HTML of ~2 caps of diff, not of megabytes


def push_section(html: str, sha: str, following: str | None) -> str:
    """The HTML of head ``sha``'s push on the page, up to the next (older) head's."""
    ids = re.findall(r'<details class="push" id="push-([0-9a-f]+)"', html)
    mine = next(i for i in ids if sha.startswith(i))
    start = html.index(f'id="push-{mine}"')
    nxt = next((i for i in ids if following and following.startswith(i)), None)
    return html[start : html.index(f'id="push-{nxt}"')] if nxt else html[start:]


def test_a_push_after_a_rebase_shows_only_the_prs_own_change(
    mon_gateway: MonitorGateway, short_tmp: Path
) -> None:
    """PR A is pushed; PR B is merged into main; A is rebased onto main, fixed and pushed again: the
    second push's diff is A's fix alone, not B's file that the rebase brought in (issue 24)."""
    gw = mon_gateway
    alice, bob = gw.add_principal("alice"), gw.add_principal("bob")
    number, first = open_pr(gw, short_tmp, alice, "alice", REBASED, "docs/alice.md")
    with gw.client(gw.operator_token) as op:
        reply = op.put(
            f"/api/forge/repos/{REBASED}/policy", json={"required_approvals": 1, "required_checks": []}
        )
        assert reply.status_code == 200, reply.text
    other, other_sha = open_pr(gw, short_tmp, bob, "bob", REBASED, "docs/bob.md")
    with gw.client(alice) as c:
        reply = c.post(
            f"/api/forge/repos/{REBASED}/pulls/{other}/reviews",
            json={"event": "APPROVED", "head_sha": other_sha},
        )
        assert reply.status_code == 201, reply.text
    wait_for(  # the gate merges B on the review's event (or its sweep): a patience, not a timing
        lambda: pr_state(gw, other) == "merged", timeout=60, what="the gate merges B"
    )

    work, home = short_tmp / "work-alice-docs-alice.md", short_tmp / "git-home"
    git(home, alice, "alice", "fetch", "-q", "origin", cwd=work)
    git(home, alice, "alice", "rebase", "-q", "origin/main", cwd=work)
    (work / "docs" / "alice.md").write_text("docs/alice.md by alice\nthe reviewer's fix\n")
    git(home, alice, "alice", "commit", "-q", "-am", "the fix", cwd=work)
    git(home, alice, "alice", "push", "-q", "-f", "origin", "alice/alice", cwd=work)
    second = git(home, alice, "alice", "rev-parse", "HEAD", cwd=work).strip()
    assert (work / "docs" / "bob.md").exists(), "the rebase brought B's file into A's branch"

    def heads() -> list[str]:
        with gw.client(gw.operator_token) as op:
            got = op.get("/api/monitor/heads", params={"repo": REBASED, "branch": "alice/alice"}).json()
        return [h["sha"] for h in got]

    wait_for(lambda: heads() == [first, second], what="both pushes recorded")
    with httpx.Client(base_url=gw.url, timeout=60) as browser:
        log_in(gw, browser)
        html = browser.get(f"/ui/prs/{REBASED}/{number}", headers={"Accept": "text/html"}).text
    newest = push_section(html, second, first)
    assert 'data-path="docs/alice.md"' in newest
    assert "docs/bob.md" not in newest, "B's merged file shows as added by A's push"
    assert "1 file(s) that came with the base branch" in newest
    assert "the reviewer" in newest  # the fix itself is shown
