"""``review.human_approvals: N``: N approvals by operator principals on the head, counted apart from the
agents' approvals, through kswarm's REST review route (what the UI and ``kswarm pr review`` use) — and
an agent cannot pass as an operator there, nor through Gitea's API."""

from __future__ import annotations

import time

from forgekit import Swarm
from typer.testing import CliRunner

from orchestrator.cli.main import app


def rest_review(swarm: Swarm, who: str, number: int, **body: object) -> tuple[int, dict]:
    token = swarm.gw.operator_token if who == "operator" else swarm.tokens[who]
    with swarm.gw.client(token) as c:
        reply = c.post(f"/api/forge/repos/{swarm.full}/pulls/{number}/reviews", json=body)
    return reply.status_code, reply.json()


def why(swarm: Swarm, number: int) -> str:
    env = {
        "KSWARM_URL": swarm.gw.url,
        "KSWARM_TOKEN": swarm.gw.operator_token,
        "COLUMNS": "200",
        "NO_COLOR": "1",
    }
    result = CliRunner().invoke(app, ["pr", "why", str(number), "--repo", swarm.full], env=env)
    assert result.exit_code == 0, result.output
    return result.output


def test_a_human_approval_counts_apart_and_agents_cannot_fake_one(swarm: Swarm) -> None:
    swarm.set_policy(required_approvals=1, human_approvals=1, required_checks=[])
    _, _, sha = swarm.push_branch("alice", "alice/human", "docs/x.md", "x\n")
    number = swarm.open_pr("alice", "alice/human")
    since = time.time()
    # an agent approves: the agents' count is met, the human one is not
    assert rest_review(swarm, "bob", number, event="APPROVE", head_sha=sha)[0] == 201
    decision = swarm.wait_decision(number, since, {"human-approvals"})
    assert decision["approvals"] == ["bob"]
    out = why(swarm, number)
    assert "0 of 1 human approval(s)" in out and "kswarm pr review" in out
    # attacks: a body naming a reviewer, Gitea's Sudo, a forged token -- none is an operator's approval
    status, _ = rest_review(swarm, "carol", number, event="APPROVED", user="operator")
    assert status == 422, "no identity field in a review"
    with swarm.api("carol") as carol:
        sudo = carol.post(
            f"/repos/{swarm.full}/pulls/{number}/reviews",
            json={"event": "APPROVED"},
            headers={"Sudo": "operator"},
        )
    assert sudo.status_code == 403
    with swarm.gw.client("ksw_forged-operator-token") as forged:
        assert (
            forged.post(
                f"/api/forge/repos/{swarm.full}/pulls/{number}/reviews", json={"event": "APPROVED"}
            ).status_code
            == 401
        )
    assert rest_review(swarm, "carol", number, event="APPROVED")[0] == 201  # carol's is an agent's
    view = swarm.view(number)
    assert not view["gate"]["mergeable"] and view["gate"]["human_approvals"] == []
    assert not swarm.pr(number)["merged"]
    # bad input is a clear refusal, not a review
    assert rest_review(swarm, "operator", number, event="LGTM")[0] == 422
    assert rest_review(swarm, "operator", number, event="APPROVED", head_sha="f" * 40)[0] == 409
    # the operator's approval through the REST route is the human one: the gate merges
    status, review = rest_review(swarm, "operator", number, event="APPROVED", body="ok by me", head_sha=sha)
    assert status == 201 and (review["user"], review["state"]) == ("operator", "APPROVED")
    merged = swarm.wait_merged(number)
    assert merged["merged_by"]["login"] == "gate"
    merge = swarm.view(number)["audit"][-1]
    assert merge["action"] == "merged" and (merge["approvals"], merge["human_approvals"]) == (
        ["bob", "carol"],
        ["operator"],
    )


def test_an_operators_approval_is_not_an_agents(swarm: Swarm) -> None:
    """Counted apart: with one agent approval and one human approval required, an operator's alone
    satisfies only the human count."""
    swarm.set_policy(required_approvals=1, human_approvals=1, required_checks=[])
    _, _, sha = swarm.push_branch("alice", "alice/apart", "docs/y.md", "y\n")
    number = swarm.open_pr("alice", "alice/apart")
    since = time.time()
    assert rest_review(swarm, "operator", number, event="APPROVED", head_sha=sha)[0] == 201
    decision = swarm.wait_decision(number, since, {"approvals"})
    assert decision["approvals"] == []
    assert "from agents other than @alice" in why(swarm, number)
    # without human_approvals, the policy is as before: no human needed
    swarm.set_policy(required_approvals=1, required_checks=[])
    assert rest_review(swarm, "bob", number, event="APPROVED", head_sha=sha)[0] == 201
    swarm.wait_merged(number)


def cli_review(swarm: Swarm, number: int) -> str:
    env = {"KSWARM_URL": swarm.gw.url, "KSWARM_TOKEN": swarm.gw.operator_token, "COLUMNS": "300"}
    argv = ["pr", "review", str(number), "--approve", "--repo", swarm.full]
    result = CliRunner().invoke(app, argv, env=env)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_kswarm_pr_review_says_what_an_operators_approval_counts_for(swarm: Swarm) -> None:
    """By default an operator's approval is recorded but counts for nothing the policy asks: the CLI
    says so (and what setting changes it). With ``operator_approvals_count`` it counts toward the
    required approvals: the CLI says so and the gate merges on it."""
    swarm.set_policy(required_approvals=1, required_checks=[])
    swarm.push_branch("alice", "alice/counted", "docs/z.md", "z\n")
    number = swarm.open_pr("alice", "alice/counted")
    said = cli_review(swarm, number)
    assert "your approval is recorded: it does not count toward merging" in said, said
    assert "review.operator_approvals_count: true" in said
    assert "from agents other than @alice" in why(swarm, number)

    swarm.set_policy(required_approvals=1, operator_approvals_count=True, required_checks=[])
    said = cli_review(swarm, number)
    assert "your approval is recorded: it counts toward the 1 required approval(s)" in said, said
    swarm.wait_merged(number)
