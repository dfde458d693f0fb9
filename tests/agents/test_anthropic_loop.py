"""The loop with the real ``anthropic`` SDK, through the gateway's LLM proxy, against the test upstream."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_kit import (
    ProxyGateway,
    agent_config,
    api,
    channel_messages,
    dm,
    git,
    records,
    replay,
    stop_task,
    stops,
    wait_for,
)

from agents.loop import run_agent
from gateway.llm.config import LLMProxySettings
from kstest.upstream import ScriptedUpstream, error_reply, text_reply, tool_reply

REAL_KEY = "sk-ant-test-" + secrets.token_hex(20)
COMMIT = (
    "git init -q && git add hello.txt && "
    "git -c user.name=bot -c user.email=bot@agents.test commit -q -m hello && env"
)


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream(api_key=REAL_KEY) as up:
        yield up


@pytest.fixture
def make_gateway(
    clean_redis: str, short_tmp: Path, upstream: ScriptedUpstream
) -> Iterator[Callable[..., ProxyGateway]]:
    started: list[ProxyGateway] = []

    def make(**overrides: Any) -> ProxyGateway:
        fields = {"upstream_url": upstream.url, "api_key": REAL_KEY, "backoff_initial": 0.05, **overrides}
        gw = ProxyGateway(clean_redis, short_tmp / f"gw{len(started)}", LLMProxySettings(**fields))
        started.append(gw)
        return gw

    yield make
    for gw in started:
        gw.stop()


def all_text(*dirs: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for d in dirs for p in d.rglob("*") if p.is_file())


async def test_agent_through_the_proxy_answers_writes_commits_and_never_sees_the_key(
    make_gateway, upstream: ScriptedUpstream, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", REAL_KEY)  # a leaky environment: the agent must not use it
    gw = make_gateway()
    token = gw.add_principal("bot")
    config = agent_config(short_tmp / "bot", token, socket=gw.socket_path, model="claude-test-1")
    upstream.script(
        error_reply(429, "slow down", retry_after=0.1),  # both retried by the proxy, honouring retry-after
        error_reply(529, "overloaded"),
        tool_reply("whoami", {}),
        tool_reply("write_file", {"path": "../escape.txt", "content": "x"}),
        tool_reply("write_file", {"path": "hello.txt", "content": "hi\n"}),
        tool_reply("bash", {"command": COMMIT}),
        tool_reply("chat_post", {"to": "operator", "text": "hello.txt is committed"}),
        default=text_reply("All done."),
    )
    task = asyncio.create_task(run_agent(config))
    try:
        await wait_for("the agent's start", lambda: records(config, "start"), task=task)
        await dm(gw.url, gw.operator_token, "bot", "please commit hello.txt")
        await wait_for("the wake to end", stops(config), task=task)
    finally:
        await stop_task(task)

    msgs = await channel_messages(gw.url, gw.operator_token, "dm:bot:operator")
    assert [m["text"] for m in msgs if m["sender"] == "bot"] == ["hello.txt is committed"]
    assert records(config, "stop")[0]["reason"] == "end_turn"
    assert not (short_tmp / "bot" / "escape.txt").exists()
    refused = [r for r in records(config, "tool_result") if r["is_error"]]
    assert len(refused) == 1 and "refused" in refused[0]["content"] and "'..'" in refused[0]["content"]
    assert git(config.work_dir, "log", "--format=%an <%ae>") == "bot <bot@agents.test>"

    seen = upstream.requests()
    assert len(seen) == 8  # a 429 and a 529 retried, then six model calls
    assert {r["key"] for r in seen} == {REAL_KEY}
    assert all(token not in str(r["headers"]) for r in seen)
    body = seen[-1]["body"]
    rebuilt = replay(records(config))  # the transcript alone rebuilds every request the upstream saw
    assert rebuilt == [r["body"]["messages"] for r in seen[2:]]
    assert body["stream"] is True and body["model"] == "claude-test-1"
    names = {t["name"] for t in body["tools"]}
    assert {"whoami", "chat_post", "inbox", "bash", "read_file", "edit_file", "memory_write"} <= names
    assert "You are bot" in body["system"]

    responses = records(config, "response")
    assert len(responses) == 6 and all(r["usage"]["output_tokens"] > 0 for r in responses)
    # The key is nowhere the agent can see: files, memory, transcript (bash's `env` output included).
    assert REAL_KEY not in all_text(config.work_dir, config.memory_dir, config.history_dir)
    assert "ANTHROPIC_API_KEY" not in records(config, "tool_result")[3]["content"]


async def test_budget_exhaustion_stops_the_wake_cleanly_and_resumes(
    make_gateway, upstream: ScriptedUpstream, short_tmp: Path
) -> None:
    gw = make_gateway(budgets={"agent": {"usd": 0.2}})
    token = gw.add_principal("bot")
    config = agent_config(short_tmp / "bot", token, url=gw.url, model="claude-test-1", stream=False)
    upstream.script(
        # $0.123: the next request's worst case no longer fits $0.2. The upstream echoes the real
        # key: the proxy must scrub it.
        tool_reply("whoami", {}, text="I saw {api_key}", usage={"input_tokens": 1000, "output_tokens": 8000}),
        default=text_reply("All done."),
    )
    task = asyncio.create_task(run_agent(config))
    try:
        await wait_for("the agent's start", lambda: records(config, "start"), task=task)
        await dm(gw.url, gw.operator_token, "bot", "first")
        first = (await wait_for("the wake to end", stops(config), task=task))[0]
        assert first["reason"] == "budget_exhausted" and first["turns"] == 1
        assert len(upstream.requests()) == 1  # the refusal is not retried, not forwarded
        async with api(gw.url, gw.operator_token) as op:
            ops = (await op.get("/api/channels/ops/messages")).json()["messages"]
            assert any("budget exhausted" in m["text"] and "bot" in m["text"] for m in ops)

            async def state() -> str | None:
                agents = (await op.get("/api/agents")).json()
                return next(a["state"] for a in agents if a["name"] == "bot") == "budget-exhausted"

            await wait_for("the budget-exhausted heartbeat", state, task=task)
            await dm(gw.url, gw.operator_token, "bot", "second")  # still refused: the loop lives on
            assert (await wait_for("a second wake", stops(config, 2), task=task))[1][
                "reason"
            ] == "budget_exhausted"
            (await op.put("/api/usage/bot/budget", json={"usd": 1.0})).raise_for_status()
        await dm(gw.url, gw.operator_token, "bot", "third")
        assert (await wait_for("a third wake", stops(config, 3), task=task))[2]["reason"] == "end_turn"
    finally:
        await stop_task(task)
    assert records(config, "response")[0]["content"][0]["text"] == "I saw [redacted]"
    assert REAL_KEY not in all_text(config.work_dir, config.memory_dir, config.history_dir)
    errors = [r for r in records(config, "error") if r["kind"] == "budget_exhausted"]
    assert len(errors) == 2 and "budget exhausted" in errors[0]["message"]
    last = upstream.requests()[-1]["body"]["messages"]
    # The refused request's context was kept: whoami's result and all three events reached the model.
    assert [m["role"] for m in last] == ["user", "assistant", "user"]
    kinds = [b["type"] for b in last[2]["content"]]
    assert kinds == ["tool_result", "text", "text"]
    assert all(word in str(last) for word in ("first", "second", "third"))


async def test_a_key_echoed_in_a_streamed_reply_never_reaches_the_agent(
    make_gateway, upstream: ScriptedUpstream, short_tmp: Path
) -> None:
    gw = make_gateway()
    config = agent_config(short_tmp / "bot", gw.add_principal("bot"), url=gw.url, model="claude-test-1")
    upstream.script(text_reply("I saw {api_key}"))  # short: the SSE deltas cut the key in pieces
    task = asyncio.create_task(run_agent(config))
    try:
        await wait_for("the agent's start", lambda: records(config, "start"), task=task)
        await dm(gw.url, gw.operator_token, "bot", "what key?")
        await wait_for("the wake to end", stops(config), task=task)
    finally:
        await stop_task(task)
    assert REAL_KEY not in all_text(config.history_dir)
