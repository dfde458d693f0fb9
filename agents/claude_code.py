"""Runtime ``claude-code``: the Claude Code CLI (bundled in the ``claude-agent-sdk`` wheel) as the agent.

Same outer loop as the kswarm loop -- sleep on the inbox, wake on events, heartbeats on a timer --
but each wake runs ``claude -p`` with the events as the prompt and ``--resume`` of the previous
session, so the conversation carries over. The CLI gets its own HOME, ``ANTHROPIC_BASE_URL`` = the
gateway's LLM proxy, the agent's own token as ``ANTHROPIC_API_KEY`` (sent as ``x-api-key``, which
the proxy accepts), an ``--mcp-config`` with the gateway's ``/mcp`` and the bearer token, and
``ENABLE_TOOL_SEARCH=false`` so the gateway's tools are listed directly. Over the unix socket a
loopback bridge (``agents.bridge``) stands in for the URL. Its ``stream-json`` output goes to the
transcript; its environment is an allow-list, never a copy of ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from pathlib import Path
from typing import Any

from agents.bridge import SocketBridge
from agents.config import AgentConfig
from agents.history import Transcript, atomic_write
from agents.prompt import HOUSE_RULES, Identity, identity_banner, read_memory, role_template, wake_message
from agents.pulse import HeartbeatSink, Pulse
from agents.session import Inbox, gateway_client, identify, prepare_dirs
from agents.timeline import TimelineReporter
from gateway.client import auth_headers

log = logging.getLogger("kswarm.agent.claude")

# KSWARM_TOKEN_FILE: the git credential helper reads the agent's token from it (a path, not the token).
ENV_PASS = (
    "PATH",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "TERM",
    "GIT_CONFIG_GLOBAL",
    "KSWARM_AGENT",
    "KSWARM_SWARM",
    "KSWARM_TOKEN_FILE",
)
QUIET_ENV = {
    "ENABLE_TOOL_SEARCH": "false",  # list the gateway's MCP tools directly
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}
ALLOWED_TOOLS = ("mcp__kswarm", "Bash", "Read", "Write", "Edit", "Glob", "Grep", "NotebookEdit", "TodoWrite")
DENIED_TOOLS = ("WebFetch", "WebSearch")


def bundled_cli() -> Path | None:
    """The Claude Code binary shipped inside the ``claude-agent-sdk`` wheel, if installed."""
    try:
        import claude_agent_sdk
    except ImportError:
        return None
    path = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def cli_path(config: AgentConfig) -> Path:
    path = config.claude_cli or bundled_cli()
    if path is None:
        raise RuntimeError("no Claude Code CLI: pip install claude-agent-sdk, or set claude_cli")
    return path


def cli_env(
    config: AgentConfig, base_url: str, home: Path, environ: dict[str, str] | None = None
) -> dict[str, str]:
    """The CLI's whole environment: an allow-list of ours plus what it needs; the only secret is the token."""
    source = os.environ if environ is None else environ
    env = {k: source[k] for k in ENV_PASS if k in source}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(QUIET_ENV)
    env.update(HOME=str(home), ANTHROPIC_BASE_URL=base_url, ANTHROPIC_API_KEY=config.secret())
    # Where the Bash tool's git reaches the forge: the gateway's own /git, over TCP (the bridge's URL when
    # the agent has only the gateway's socket), as agents/tools/git_remote.py gives the loop's bash.
    env["KSWARM_GIT_URL"] = source.get("KSWARM_GIT_URL") or f"{base_url.rstrip('/')}/git"
    return env


def mcp_config(config: AgentConfig, base_url: str) -> dict[str, Any]:
    server = {
        "type": "http",
        "url": f"{base_url}/mcp",
        "headers": auth_headers(config.secret()),
    }
    return {"mcpServers": {"kswarm": server}}


def appended_prompt(config: AgentConfig, me: Identity) -> str:
    rules = HOUSE_RULES.format(work=config.work_dir, name=me.name, email=me.email)
    rules += f"\n- Your memory file is {config.memory_dir / 'MEMORY.md'}; edit it with your file tools."
    memory = "# Your memory (MEMORY.md)\n\n" + read_memory(config.memory_dir)
    return "\n\n".join([identity_banner(config, me), role_template(config), rules, memory])


class ClaudeCodeRunner:
    """Runs one ``claude -p`` per wake and records its stream-json events."""

    def __init__(
        self,
        config: AgentConfig,
        me: Identity,
        base_url: str,
        home: Path,
        timeline: TimelineReporter | None = None,
    ) -> None:
        self.config = config
        self.me = me
        self.base_url = base_url
        self.home = home
        self.transcript = Transcript(config.history_dir, sink=timeline.record if timeline else None)
        self.session_file = config.history_dir / "claude-session.json"
        self.mcp_file = home / ".kswarm" / "mcp.json"

    def session_id(self) -> str | None:
        try:
            return json.loads(self.session_file.read_text()).get("session_id")
        except (OSError, ValueError):
            return None

    def argv(self, prompt: str) -> list[str]:
        config = self.config
        argv = [str(cli_path(config)), "-p", prompt, "--output-format", "stream-json", "--verbose"]
        argv += ["--mcp-config", str(self.mcp_file), "--strict-mcp-config"]
        argv += ["--model", config.model, "--max-turns", str(config.max_turns)]
        argv += ["--append-system-prompt", appended_prompt(config, self.me)]
        argv += ["--add-dir", str(config.memory_dir)]
        argv += ["--allowedTools", *ALLOWED_TOOLS, "--disallowedTools", *DENIED_TOOLS]
        if (session := self.session_id()) is not None:
            argv += ["--resume", session]
        return argv

    def prepare(self) -> None:
        self.mcp_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.mcp_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(mcp_config(self.config, self.base_url), fh)

    async def wake(self, events: list[dict[str, Any]]) -> str:
        """Run the CLI on the events; returns why it stopped (end_turn, budget_exhausted, error, ...)."""
        self.transcript.write("wake", events=events)
        argv = self.argv(wake_message(events))
        self.transcript.write("request", runtime="claude-code", argv=argv[:1] + argv[3:], prompt=argv[2])
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=self.config.work_dir,
            env=cli_env(self.config, self.base_url, self.home),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=16 * 1024 * 1024,
            start_new_session=True,
        )
        reason = "error"
        try:
            reason = await asyncio.wait_for(self._read(proc), self.config.claude_timeout_s)
        except TimeoutError:
            reason = "timeout"
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
            stderr = (await proc.stderr.read()).decode(errors="replace") if proc.stderr else ""
            await proc.wait()
        self.transcript.write("stop", reason=reason, exit_code=proc.returncode, stderr=stderr[-4000:])
        return reason

    async def _read(self, proc: asyncio.subprocess.Process) -> str:
        assert proc.stdout is not None
        reason = "error"
        async for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                self.transcript.write("claude_output", text=line.decode(errors="replace")[:4000])
                continue
            self.transcript.write("claude_event", event=event)
            if event.get("session_id"):
                atomic_write(self.session_file, json.dumps({"session_id": event["session_id"]}))
            if event.get("type") == "result":
                reason = result_reason(event)
        await proc.wait()
        return reason


def result_reason(event: dict[str, Any]) -> str:
    if not event.get("is_error"):
        return str(event.get("stop_reason") or "end_turn")
    text = json.dumps(event).lower()
    if "budget exhausted" in text:
        return "budget_exhausted"
    return str(event.get("subtype") or "error")


async def run_claude_code(config: AgentConfig, heartbeat: HeartbeatSink | None = None) -> None:
    """``run_agent`` for runtime ``claude-code``: identify, then sleep on the inbox and run the CLI."""
    prepare_dirs(config)
    home = config.home_dir or Path(os.environ.get("HOME") or config.history_dir.parent / "home")
    home.mkdir(parents=True, exist_ok=True)
    async with contextlib.AsyncExitStack() as stack:
        gateway = await stack.enter_async_context(gateway_client(config))
        me = await identify(gateway, config)
        if config.gateway_socket is not None:
            base_url = (await stack.enter_async_context(SocketBridge(config.gateway_socket))).url
        else:
            base_url = config.base_url()
        pulse = await stack.enter_async_context(
            Pulse(heartbeat or gateway, config.heartbeat_s, config.heartbeat_log_s)
        )
        timeline = (
            await stack.enter_async_context(TimelineReporter(gateway)) if config.report_timeline else None
        )
        runner = ClaudeCodeRunner(config, me, base_url, home, timeline)
        runner.prepare()
        runner.transcript.write("start", name=me.name, runtime="claude-code", cli=str(cli_path(config)))
        pulse.set("idle", "waiting for messages")
        inbox = Inbox(gateway, config)
        while True:
            items = await inbox.next()
            pulse.set("working", f"claude-code on {len(items)} event(s)")
            reason = await runner.wake(items)
            await inbox.handled(items)
            log.info("claude-code wake ended: %s", reason)
            pulse.set("budget-exhausted" if reason == "budget_exhausted" else "idle", f"last wake: {reason}")
