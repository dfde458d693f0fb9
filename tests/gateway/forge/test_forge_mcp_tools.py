"""The agents' PR tools through the official MCP client."""

from __future__ import annotations

import json

import pytest
from forgekit import Swarm

from kstest.mcp_client import ToolFailed, call, mcp_session

PR_TOOLS = {"pr_open", "pr_list", "pr_view", "pr_review", "pr_comment"}


async def test_pr_tools_round_trip(swarm: Swarm) -> None:
    _, _, sha = swarm.push_branch("alice", "alice/mcp", "kernels/relu/alice_v1.py", "def relu(x): ...\n")
    url, repo = swarm.gw.url, swarm.full
    async with mcp_session(url, swarm.tokens["alice"]) as alice:
        tools = {t.name: t for t in (await alice.list_tools()).tools}
        assert PR_TOOLS <= set(tools)
        opened = await call(
            alice, "pr_open", head="alice/mcp", title="ReLU kernel", body="fp32", reviewers=["bob"], repo=repo
        )
        number = opened["number"]
        assert (opened["author"], opened["head_sha"], opened["state"]) == ("alice", sha, "open")
        with pytest.raises(ToolFailed, match="approve your own pull is not allowed"):
            await call(alice, "pr_review", number=number, event="APPROVED", repo=repo)
        with pytest.raises(ToolFailed, match="own branches"):
            await call(alice, "pr_open", head="main", title="sneaky", repo=repo)
    async with mcp_session(url, swarm.tokens["bob"]) as bob:
        inbox = await call(bob, "inbox")
        assert any(i["reason"] == "notice" and f"{repo}#{number}" in i["text"] for i in inbox)
        listed = await call(bob, "pr_list", repo=repo)
        assert [(p["number"], p["gate"]["mergeable"]) for p in listed] == [(number, False)]
        view = await call(bob, "pr_view", number=number, repo=repo)
        assert "+def relu(x): ..." in view["diff"]
        assert {r["code"] for r in view["gate"]["reasons"]} == {"approvals", "kernel-unverified"}
        assert [k["path"] for k in view["gate"]["kernels"]] == ["kernels/relu/alice_v1.py"]
        review = await call(
            bob, "pr_review", number=number, event="APPROVE", head_sha=view["head_sha"], repo=repo
        )
        assert (review["state"], review["commit_id"]) == ("APPROVED", sha)
        await call(bob, "pr_comment", number=number, body="checked the tail handling", repo=repo)
        view = await call(bob, "pr_view", number=number, repo=repo, diff=False)
        assert "diff" not in view
        assert [(r["user"], r["state"]) for r in view["reviews"]] == [("bob", "APPROVED")]
        assert view["comments"] == [{"user": "bob", "body": "checked the tail handling"}]
        assert {r["code"] for r in view["gate"]["reasons"]} == {"kernel-unverified"}
        assert view["gate"]["approvals"] == ["bob"]
        assert await call(bob, "pr_list", repo=repo, mine=True) == []


async def test_pr_tool_definitions_stay_small(swarm: Swarm) -> None:
    async with mcp_session(swarm.gw.url, swarm.tokens["alice"]) as alice:
        tools = [t for t in (await alice.list_tools()).tools if t.name in PR_TOOLS]
    assert all(len(t.description or "") <= 120 for t in tools)
    size = len(
        json.dumps(
            [t.model_dump(exclude_none=True, include={"name", "description", "input_schema"}) for t in tools]
        )
    )
    assert size < 4000, size
