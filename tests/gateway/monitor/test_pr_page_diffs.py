"""The UI's PR page renders bounded diffs (issue 23): the PR's diff and each push's diff are cut while
they are read (a file over the per-file cap is never read, the page's push diffs share one budget), and
the page says what it left out. Attacked as a misbehaving agent would: alice pushes megabytes through
the gateway's git over HTTP with her own token, the operator opens the PR's page."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from monitor_kit import MonitorGateway, git, log_in, monitor_plugins, open_pr, wait_for

from gateway.forge.plugin import ForgePlugin
from gateway.forge.settings import ForgeSettings
from gateway.plugin import Plugin

REPO = "kswarm/bigdiff"
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
