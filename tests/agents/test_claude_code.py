"""Runtime claude-code: the real Claude Code CLI against the test upstream, through the gateway."""

from __future__ import annotations

import asyncio
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest
from agent_kit import ProxyGateway, agent_config, channel_messages, dm, records, stop_task, stops, wait_for

from agents.bridge import SocketBridge
from agents.claude_code import bundled_cli, cli_env
from agents.loop import run_agent
from gateway.llm.config import LLMProxySettings
from kstest.mcp_client import call, mcp_session
from kstest.upstream import ScriptedUpstream, text_reply, tool_reply

REAL_KEY = "sk-ant-test-" + secrets.token_hex(20)


def cli_problem() -> str | None:
    """Why the CLI cannot run here, or None."""
    cli = bundled_cli()
    if cli is None:
        return "claude-agent-sdk is not installed (CI: pip install claude-agent-sdk; it bundles the CLI)"
    try:
        out = subprocess.run([str(cli), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the bundled Claude Code CLI does not start here: {exc}"
    if out.returncode != 0:
        return f"the bundled Claude Code CLI fails here: {out.stderr.strip()[:200]}"
    return None


@pytest.fixture
def proxy_gateway(clean_redis: str, short_tmp: Path) -> Iterator[tuple[ProxyGateway, ScriptedUpstream]]:
    with ScriptedUpstream(api_key=REAL_KEY) as upstream:
        gw = ProxyGateway(
            clean_redis, short_tmp / "gw", LLMProxySettings(upstream_url=upstream.url, api_key=REAL_KEY)
        )
        try:
            yield gw, upstream
        finally:
            gw.stop()


async def test_socket_bridge_carries_the_proxy_and_mcp(proxy_gateway, short_tmp: Path) -> None:
    gw, upstream = proxy_gateway
    token = gw.add_principal("bot")
    upstream.script(text_reply("streamed through the bridge"))
    async with SocketBridge(gw.socket_path) as bridge:
        client = anthropic.AsyncAnthropic(base_url=bridge.url, api_key=token, max_retries=0)
        async with client.messages.stream(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            message = await stream.get_final_message()
        await client.close()
        assert message.content[0].text == "streamed through the bridge"
        async with mcp_session(bridge.url, token) as session:  # Host: kswarm passes MCP's host check
            assert (await call(session, "whoami"))["name"] == "bot"
    assert upstream.requests()[0]["key"] == REAL_KEY


def test_cli_environment_is_an_allow_list(tmp_path: Path) -> None:
    config = agent_config(tmp_path, "ksw_own", url="http://127.0.0.1:1", runtime="claude-code")
    leaky = {"PATH": "/bin", "ANTHROPIC_API_KEY": REAL_KEY, "KSWARM_LLM_API_KEY": REAL_KEY, "AWS_SECRET": "x"}
    env = cli_env(config, "http://127.0.0.1:1", tmp_path / "home", leaky)
    assert env["ANTHROPIC_API_KEY"] == "ksw_own" and env["ENABLE_TOOL_SEARCH"] == "false"
    assert REAL_KEY not in str(env) and "AWS_SECRET" not in env and env["HOME"] == str(tmp_path / "home")


async def test_claude_code_cli_posts_to_chat_through_gateway_mcp(proxy_gateway, short_tmp: Path) -> None:
    problem = cli_problem()
    if problem:
        pytest.skip(problem)
    gw, upstream = proxy_gateway
    token = gw.add_principal("bot")
    config = agent_config(
        short_tmp / "bot", token, socket=gw.socket_path, runtime="claude-code", model="claude-test-1",
        home_dir=short_tmp / "bot" / "home", max_turns=4, claude_timeout_s=120,
    )  # fmt: skip
    upstream.script(
        tool_reply("mcp__kswarm__chat_post", {"to": "operator", "text": "hello from claude code"}),
        text_reply("Answered the operator."),
        default=text_reply("Nothing more to do."),
    )
    task = asyncio.create_task(run_agent(config))
    try:
        await wait_for("the agent's start", lambda: records(config, "start"), task=task)
        await dm(gw.url, gw.operator_token, "bot", "say hello")
        first = await wait_for("the CLI's first wake", stops(config), within=150, task=task)
        assert first[0]["reason"] == "end_turn", first[0]
        await dm(gw.url, gw.operator_token, "bot", "anything else?")
        await wait_for("the CLI's second wake", stops(config, 2), within=150, task=task)
    finally:
        await stop_task(task)

    msgs = await channel_messages(gw.url, gw.operator_token, "dm:bot:operator")
    assert [m["text"] for m in msgs if m["sender"] == "bot"] == ["hello from claude code"]
    seen = upstream.requests()
    assert seen and {r["key"] for r in seen} == {REAL_KEY}
    tools = {t["name"] for t in seen[0]["body"]["tools"]}
    assert {"mcp__kswarm__chat_post", "mcp__kswarm__whoami", "mcp__kswarm__inbox"} <= tools  # listed directly
    assert "You are bot" in str(seen[0]["body"]["system"])
    assert "say hello" in str(seen[-1]["body"]["messages"])  # the second wake resumed the session
    events = [r["event"] for r in records(config, "claude_event")]
    assert any(e.get("type") == "result" for e in events)
    home_files = "".join(p.read_text(errors="replace") for p in (short_tmp / "bot").rglob("*") if p.is_file())
    assert REAL_KEY not in home_files
