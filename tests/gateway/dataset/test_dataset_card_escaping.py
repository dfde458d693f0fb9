"""Every value the card shows that does not come from the card itself goes through ``md_text`` or
``md_code``: task, pool, author, kernel path, commit, verdict, flag, evidence, agent, model, repo. The
gateway validates most of them today (names, paths); the card does not rely on it (issue 23)."""

from __future__ import annotations

import re
from typing import Any

from gateway.dataset.card import render_card, summarize
from gateway.dataset.loop_sources import CounterexampleRecord
from gateway.dataset.markdown import md_code, md_text
from gateway.dataset.numbers import loop_numbers
from gateway.dataset.withdrawals import Withdrawal

EVIL = "x</td><script>alert(1)</script>\n# Owned | [l](http://e) `c` *e* _u_ ~s~ $m$ \\ &amp;"
CELL = re.compile(r"(?<!\\)\|")


def row(**over: Any) -> dict[str, Any]:
    base = {
        "task": EVIL,
        "pool": EVIL,
        "author": EVIL,
        "kernel_path": EVIL,
        "commit": EVIL,
        "verdict": EVIL,
        "flags": [EVIL],
        "evidence": EVIL,
        "passed": True,
        "accepted": True,
        "status": "accepted",
        "family": None,
        "cost_usd": 0.25,
    }
    return base | over


def hostile_loop(rows: list[dict[str, Any]], cost: dict[str, Any]) -> dict[str, Any]:
    """A withdrawal and a counterexample whose every name is hostile (the regression cases' table)."""
    withdrawal = Withdrawal(
        repo=EVIL, task=EVIL, kernel=EVIL, sha=EVIL, reason=EVIL, counterexample=EVIL, job=EVIL,
        author=EVIL, at=1.0,
    )  # fmt: skip
    cx = CounterexampleRecord(
        id=EVIL, finder=EVIL, task=EVIL, repo=EVIL, kernel=EVIL, sha=EVIL, status="confirmed"
    )
    return loop_numbers(rows, [withdrawal], [cx], cost, {EVIL: "red-team"})


def test_hostile_values_in_every_position_stay_text_in_their_cell() -> None:
    cost = {"lines": [{"task": EVIL, "agent": EVIL, "model": EVIL, "tokens": 10, "cost_usd": 0.5}]}
    rows = [row(), row(status="rejected", family="wrong", accepted=False, passed=False)]
    card = render_card(summarize(rows, EVIL, cost, {EVIL: EVIL}, hostile_loop(rows, cost)))
    assert "<script" not in card and "</td>" not in card and "alert(1)</" not in card
    lines = card.splitlines()
    headings = [line for line in lines if line.lstrip().startswith("#")]
    assert headings[0] == f"# kswarm kernel dataset: {md_text(EVIL)}"  # the repo, escaped, on its line
    own = {"## Counts", "## Evidence", "### Pools", "### Tasks", "### Authors", "## Cost", "## Loading"}
    own |= {"## Schema", "## Caveats", "## Splits", "### Regression cases"}
    own |= {"## Per task: accepted, withdrawn, rejected, counterexamples, cost"}
    assert set(headings[1:]) <= own, headings
    assert not re.search(r"(?<!\\)\]\(", card), "no link"
    assert not [line for line in lines if line.strip() == "# Owned | [l](http://e)"]
    tables = 0
    for i, line in enumerate(lines):
        if line.startswith("|---"):  # a delimiter row: its header above, its rows below
            tables += 1
            width = len(CELL.split(lines[i - 1]))
            for body in lines[i + 1 :]:
                if not body.startswith("|"):
                    break
                assert len(CELL.split(body)) == width, (lines[i - 1], body)
    assert tables >= 10  # splits, per task, regression cases, evidence, pools, tasks, authors, cost ×3
    assert md_text(EVIL) in card


def test_md_text_and_md_code() -> None:
    text = md_text(EVIL)
    assert "\n" not in text and "<" not in text and ">" not in text
    assert not CELL.search(text), "every | escaped"
    assert "&amp;amp;" in text, "an entity in the value stays literal text"
    for raw in ("#", "-", "+", "=", "1.", "2)"):
        assert md_text(raw + " x").startswith("\\"), raw  # no heading, list, underline
    assert md_text("> x") == "&gt; x"  # no quote
    assert md_text("a\r\nb\u2028c\x00d") == "a b c d"
    assert md_code("kernels/add/alice_add.py") == "`kernels/add/alice_add.py`"
    assert md_code("a`b") == md_text("a`b") == "a\\`b"
    assert md_code("a|b") == "a\\|b"
