"""The operator's review from the UI and from ``kswarm pr review|comment``: it counts for the gate under
``review.human_approvals``, it is refused without the session's CSRF token, and it is audited (the
monitor's action log, the gate's decision, ``#reviews`` to the author)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from monitor_kit import MonitorGateway, git, log_in, open_pr
from typer.testing import CliRunner

from kstest.waiting import wait_for
from orchestrator.cli.main import app

REPO = "kswarm/reviewed"


def pr_view(gw: MonitorGateway, number: int) -> dict:
    with gw.client(gw.operator_token) as op:
        reply = op.get(f"/api/forge/repos/{REPO}/pulls/{number}")
    assert reply.status_code == 200, reply.text
    return reply.json()


def set_policy(gw: MonitorGateway, **policy: object) -> None:
    with gw.client(gw.operator_token) as op:
        reply = op.put(f"/api/forge/repos/{REPO}/policy", json=policy)
    assert reply.status_code == 200, reply.text


def kswarm_pr(gw: MonitorGateway, token: str, tmp: Path, *argv: str) -> tuple[int, str, str]:
    env = {"KSWARM_URL": gw.url, "KSWARM_TOKEN": token, "KSWARM_HOME": str(tmp / "none"), "COLUMNS": "200"}
    result = CliRunner().invoke(app, ["pr", *argv], env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_an_operator_approval_from_the_ui_counts_for_the_gate(
    mon_gateway: MonitorGateway, short_tmp: Path
) -> None:
    gw = mon_gateway
    alice, bob = gw.add_principal("alice"), gw.add_principal("bob")
    number, sha = open_pr(gw, short_tmp, alice, "alice", REPO, "docs/notes.md")
    set_policy(gw, required_approvals=1, human_approvals=1, required_checks=[])
    with gw.client(bob) as c:
        reply = c.post(
            f"/api/forge/repos/{REPO}/pulls/{number}/reviews", json={"event": "APPROVED", "head_sha": sha}
        )
        assert reply.status_code == 201, reply.text
    review = {"event": "approve", "body": "ok by me", "head_sha": sha}
    url = f"/ui/api/actions/prs/{REPO}/{number}/review"
    with httpx.Client(base_url=gw.url, timeout=30) as browser:
        csrf = log_in(gw, browser)
        # Attack: the session's cookie without its CSRF token (what a cross-site page can send).
        assert browser.post(url, json=review).status_code == 403
        assert browser.post(url, json=review, headers={"X-CSRF-Token": "guess"}).status_code == 403
        assert [r["user"] for r in pr_view(gw, number)["reviews"]] == ["bob"]
        assert pr_view(gw, number)["state"] == "open"
        # With the token: the operator's approval is the human one; the gate merges.
        reply = browser.post(url, json=review, headers={"X-CSRF-Token": csrf})
        assert reply.status_code == 200, reply.text
        assert reply.json()["data"]["commit_id"] == sha
    merged = wait_for(  # the gate's sweep, on a loaded machine: a patience, not a timing assertion
        lambda: (v := pr_view(gw, number))["state"] == "merged" and v, timeout=60, what="the gate merges"
    )
    decision = next(e for e in reversed(merged["audit"]) if e["action"] == "merged")
    assert decision["human_approvals"] == ["operator"] and decision["approvals"] == ["bob"]
    with gw.client(gw.operator_token) as op:
        [record] = op.get("/api/monitor/actions").json()
        notes = op.get("/api/channels/reviews/messages").json()["messages"]
    assert (record["action"], record["target"], record["outcome"]) == (
        "review:approve",
        f"{REPO}#{number}",
        "done",
    )
    note = next(m for m in notes if m["sender"] == "operator")
    assert "alice" in note["mentions"] and f"approved {REPO}#{number}" in note["text"]


def test_kswarm_pr_review_and_comment(mon_gateway: MonitorGateway, short_tmp: Path, tmp_path: Path) -> None:
    gw = mon_gateway
    alice = gw.add_principal("alice")
    number, _ = open_pr(gw, short_tmp, alice, "alice", REPO, "docs/cli.md")
    op = gw.operator_token
    code, out, err = kswarm_pr(
        gw, op, tmp_path, "review", str(number), "--request-changes", "-m", "add a test"
    )
    assert code == 0, err
    assert f"requested changes on {REPO}#{number}" in out
    code, out, err = kswarm_pr(gw, op, tmp_path, "comment", str(number), "-m", "see **#reviews**")
    assert code == 0 and f"commented on {REPO}#{number}" in out, err
    view = pr_view(gw, number)
    assert [(r["user"], r["state"], r["body"]) for r in view["reviews"]] == [
        ("operator", "REQUEST_CHANGES", "add a test")
    ]
    assert [(c["user"], c["body"]) for c in view["comments"]][-1] == ("operator", "see **#reviews**")
    # Bad input: one line, exit 2, nothing done.
    for argv in (
        ("review", str(number), "-m", "x"),  # no event
        ("review", str(number), "--approve", "--request-changes"),
        ("review", str(number), "--comment"),  # a comment review without text
        ("comment", str(number)),
        ("review", str(number), "--approve", "--repo", "not-a-repo"),
    ):
        code, _, err = kswarm_pr(gw, op, tmp_path, *argv)
        assert code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1, (argv, err)
    code, _, err = kswarm_pr(gw, op, tmp_path, "review", "999", "--approve")
    assert code != 0 and "999" in err
    # An agent's token is not an operator's: the action is refused (exit code of a refusal), not done.
    code, _, err = kswarm_pr(gw, alice, tmp_path, "review", str(number), "--approve", "--repo", REPO)
    assert code != 0 and err.startswith("error: ")
    assert len(pr_view(gw, number)["reviews"]) == 1


def test_the_pr_page_shows_one_diff_per_push(mon_gateway: MonitorGateway, short_tmp: Path) -> None:
    gw = mon_gateway
    alice = gw.add_principal("alice")
    number, first = open_pr(gw, short_tmp, alice, "alice", REPO, "docs/pushes.md")
    work = short_tmp / "work-alice-docs-pushes.md"
    (work / "docs" / "second.md").write_text("the second push\n")
    git(short_tmp / "git-home", alice, "alice", "add", "docs/second.md", cwd=work)
    git(short_tmp / "git-home", alice, "alice", "commit", "-q", "-m", "second push", cwd=work)
    git(short_tmp / "git-home", alice, "alice", "push", "-q", "origin", "alice/pushes", cwd=work)
    second = git(short_tmp / "git-home", alice, "alice", "rev-parse", "HEAD", cwd=work).strip()

    def heads() -> list[str]:
        with gw.client(gw.operator_token) as op:
            got = op.get("/api/monitor/heads", params={"repo": REPO, "branch": "alice/pushes"}).json()
        return [h["sha"] for h in got]

    wait_for(lambda: heads() == [first, second], what="both pushes recorded")
    with httpx.Client(base_url=gw.url, timeout=30) as browser:
        log_in(gw, browser)
        html = browser.get(f"/ui/prs/{REPO}/{number}", headers={"Accept": "text/html"}).text
    pushes = re.findall(r'<details class="push" id="push-([0-9a-f]+)"', html)
    assert sorted(pushes) == sorted([first[:10], second[:10]]) or sorted(pushes) == sorted(
        [first[:7], second[:7]]
    )
    newest = html[html.index(f'id="push-{pushes[0]}"') : html.index(f'id="push-{pushes[1]}"')]
    assert "docs/second.md" in newest and "docs/pushes.md" not in newest, "a push's diff is its own change"
