"""The scripted demo policy on its own: plan replay, its guards, and the git command it writes."""

from __future__ import annotations

import json
from pathlib import Path

from agent_kit import git

from agents.models.conversation import SUMMARY_SYSTEM
from agents.models.scripted import Call, Scratch, ScriptedModel, commit_command
from agents.prompt import wake_message
from agents.tools import LocalTools

TOOLS = [{"name": n, "description": n, "input_schema": {"type": "object"}} for n in
         ("whoami", "chat_post", "write_file", "bash")]  # fmt: skip
DM = {"reason": "dm", "channel": "dm:bot:op", "message_id": "1-0", "sender": "op", "text": "hi"}


async def drive(model: ScriptedModel, events: list[dict], results: dict[str, str]) -> list[tuple[str, dict]]:
    """Run the policy to the end of its turn, answering each call from ``results``."""
    messages: list[dict] = [{"role": "user", "content": wake_message(events)}]
    calls = []
    for _ in range(10):
        reply = await model.complete("system", messages, TOOLS, 100)
        messages.append({"role": "assistant", "content": reply.content})
        if reply.stop_reason != "tool_use":
            return calls
        use = reply.tool_uses()[0]
        calls.append((use["name"], use["input"]))
        result = {"type": "tool_result", "tool_use_id": use["id"], "content": results.get(use["name"], "ok")}
        messages.append({"role": "user", "content": [result]})
    raise AssertionError("the policy did not end its turn")


async def test_a_dm_is_noted_committed_and_answered_deterministically() -> None:
    results = {
        "whoami": json.dumps({"name": "bot", "email": "bot@agents.t"}),
        "bash": "abc1234\n[exit code 0]",
    }
    calls = await drive(ScriptedModel(), [DM], results)
    assert [c[0] for c in calls] == ["whoami", "write_file", "bash", "chat_post"]
    assert "user.email=bot@agents.t" in calls[2][1]["command"]
    assert calls[3][1] == {"to": "op", "text": "Got it, op: noted in notes/op-1_0.md, commit abc1234."}
    assert await drive(ScriptedModel(), [DM], results) == calls


async def test_guards_no_ping_pong_missing_tools_and_unknown_events() -> None:
    assert await drive(ScriptedModel(), [DM | {"text": "Got it, bot: noted"}], {}) == []
    assert await drive(ScriptedModel(), [{"reason": "notice", "text": "x"}], {}) == []
    reply = await ScriptedModel().complete(
        "s", [{"role": "user", "content": wake_message([DM])}], TOOLS[1:], 10
    )
    assert reply.stop_reason == "end_turn" and "whoami is not offered" in reply.text()
    summary = await ScriptedModel().complete(SUMMARY_SYSTEM, [{"role": "user", "content": "a\nb"}], [], 10)
    assert summary.text().startswith("Scripted summary")


async def test_the_commit_goes_to_the_agents_own_repo_not_an_enclosing_one(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    work = tmp_path / "agents" / "bot" / "work"
    work.mkdir(parents=True)
    (work / "n.md").write_text("x")
    scratch = Scratch([DM], [Call("whoami", {})], [json.dumps({"name": "bot", "email": "bot@agents.t"})])
    tools = LocalTools(work, tmp_path / "memory", bash_timeout=20)
    result = await tools.call("bash", {"command": commit_command(scratch, "n.md", "note")})
    assert not result.is_error, result.text
    assert (work / ".git").is_dir()
    assert git(tmp_path, "rev-list", "--all", "--count") == "0"  # the enclosing repository got nothing
    assert git(work, "log", "--format=%an <%ae>") == "bot <bot@agents.t>"
