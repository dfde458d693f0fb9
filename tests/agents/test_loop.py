"""The agent loop end to end: a real gateway, the real loop, the offline scripted model."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

from agent_kit import agent_config, channel_messages, dm, git, records, replay, stop_task, stops, wait_for

from agents.loop import run_agent
from agents.models.scripted import Call, ScriptedModel, default_rules
from kstest.gateway import GatewayThread


async def test_scripted_agent_answers_a_dm_writes_and_commits_offline(
    gateway: GatewayThread, short_tmp: Path
) -> None:
    token = gateway.add_principal("bot")
    config = agent_config(short_tmp / "bot", token, url=gateway.url)
    task = asyncio.create_task(run_agent(config))
    try:
        await wait_for("the agent's start", lambda: records(config, "start"), task=task)
        sent = await dm(gateway.url, gateway.operator_token, "bot", "please note: kernels at 9")
        await wait_for("the wake to end", stops(config), task=task)
        msgs = await channel_messages(gateway.url, gateway.operator_token, "dm:bot:operator")
        answer = [m for m in msgs if m["sender"] == "bot"]
        assert len(answer) == 1 and answer[0]["text"].startswith("Got it, operator")
    finally:
        await stop_task(task)

    note = config.work_dir / f"notes/operator-{sent['id'].replace('-', '_')}.md"
    assert "kernels at 9" in note.read_text()
    log = git(config.work_dir, "log", "--format=%an <%ae>|%cn <%ce>|%s")
    assert log == "bot <bot@agents.test>|bot <bot@agents.test>|Note the message from operator"
    sha = git(config.work_dir, "rev-parse", "--short", "HEAD")
    assert sha in answer[0]["text"]

    stop = records(config, "stop")[0]
    assert stop["reason"] == "end_turn" and stop["turns"] == 5
    calls = [r["name"] for r in records(config, "tool_call")]
    assert calls == ["whoami", "write_file", "bash", "chat_post"]
    results = records(config, "tool_result")
    assert [r["id"] for r in results] == [r["id"] for r in records(config, "tool_call")]
    assert not any(r["is_error"] for r in results)
    responses = records(config, "response")
    assert len(responses) == 5 and all(r["usage"]["input_tokens"] > 0 for r in responses)
    requests = records(config, "request")
    assert len(requests) == 5 and "You are bot" in requests[0]["system"]
    assert "chat_post" in [t["name"] for t in requests[0]["tools"]]
    context = json.loads((config.history_dir / "context.json").read_text())["messages"]
    assert replay(records(config))[-1] == context[:-1]  # the transcript rebuilds what the model saw


async def test_memory_and_context_survive_a_restart(gateway: GatewayThread, short_tmp: Path) -> None:
    token = gateway.add_principal("bot")
    config = agent_config(short_tmp / "bot", token, url=gateway.url)

    def remember(event: dict) -> list:
        fact = event["text"].removeprefix("remember ")
        return [lambda s: Call("memory_write", {"content": f"- {fact}\n", "append": True})]

    model = ScriptedModel({**default_rules(), "dm": remember})
    task = asyncio.create_task(run_agent(config, model=model))
    await wait_for("the agent's start", lambda: records(config, "start"), task=task)
    await dm(gateway.url, gateway.operator_token, "bot", "remember the softmax kernel passed on cpu")
    await wait_for("the first wake", stops(config), task=task)
    await stop_task(task)

    task = asyncio.create_task(run_agent(config, model=ScriptedModel()))  # a new process, as far as it knows
    try:
        await wait_for("the restart", lambda: len(records(config, "start")) == 2, task=task)
        await dm(gateway.url, gateway.operator_token, "bot", "Got it? (no answer expected)")
        await wait_for("the second wake", stops(config, 2), task=task)
    finally:
        await stop_task(task)
    second = records(config, "request")[-1]
    assert "- the softmax kernel passed on cpu" in second["system"]  # MEMORY.md is in the prompt
    assert second["n_messages"] >= 5  # the conversation before the restart was carried over


async def test_compaction_summarises_old_wakes_and_keeps_the_recent_ones(
    gateway: GatewayThread, short_tmp: Path
) -> None:
    token = gateway.add_principal("bot")
    config = agent_config(short_tmp / "bot", token, url=gateway.url, compact_at_tokens=1000, keep_messages=8)
    task = asyncio.create_task(run_agent(config))
    try:
        await wait_for("the agent's start", lambda: records(config, "start"), task=task)
        for i in range(3):
            await dm(gateway.url, gateway.operator_token, "bot", f"note {i}")
            await wait_for(f"wake {i}", stops(config, i + 1), task=task)
    finally:
        await stop_task(task)
    assert [s["reason"] for s in records(config, "stop")] == ["end_turn"] * 3
    assert (
        len(
            records(
                config,
                "tool_call",
            )
        )
        == 12
    )  # every wake made its four calls despite compaction
    compactions = records(config, "compaction")
    assert compactions and all(c["summary"].startswith("Scripted summary") for c in compactions)
    context = json.loads((config.history_dir / "context.json").read_text())["messages"]
    assert context[0]["content"][0]["text"].startswith("[Summary of the earlier conversation")
    assert len(context) <= 8 + 2 and [m["role"] for m in context[:2]] == ["user", "assistant"]
    assert all(a["role"] != b["role"] for a, b in itertools.pairwise(context))
    bot_answers = [
        m for m in await channel_messages(gateway.url, gateway.operator_token, "dm:bot:operator")
        if m["sender"] == "bot"
    ]  # fmt: skip
    assert len(bot_answers) == 3
    assert replay(records(config))[-1] == context[:-1]  # compaction records keep the transcript replayable
