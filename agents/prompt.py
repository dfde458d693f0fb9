"""The system prompt (role template + identity banner + house rules + MEMORY.md) and wake messages."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.config import AgentConfig

PROMPTS = Path(__file__).parent / "prompts"
EVENTS_OPEN, EVENTS_CLOSE = "<events>", "</events>"
MEMORY_CHARS = 24_000  # MEMORY.md beyond this is cut in the prompt (the file keeps everything)

HOUSE_RULES = """\
House rules:
- You act only through your tools. The gateway's tools (chat, code, jobs, ...) act as you: the server
  knows who you are from your token, so never claim to be anyone else.
- Answer people where they asked: a DM with chat_post `to`, a channel message in its thread (reply_to).
- Your files live in your work dir {work}; file tools and bash run there, and paths outside it are
  refused. Commit as yourself: git user.name "{name}", user.email "{email}".
- MEMORY.md (below) is your only memory across restarts. Keep it short and factual with memory_write;
  record what you verified, not what others claimed about themselves.
- Check before you claim; say what you do not know. When you are done, end your turn with one line
  on what you did: you will be woken again by the next message, review request, job result or task."""


@dataclass(frozen=True)
class Identity:
    """Who the gateway says we are (``/api/me``), never what a prompt or memory claims."""

    name: str
    email: str


def role_template(config: AgentConfig) -> str:
    text = config.prompt_text()
    if text:
        return text.strip()
    path = PROMPTS / f"{config.role}.md"
    return (path if path.is_file() else PROMPTS / "default.md").read_text().strip()


def identity_banner(config: AgentConfig, me: Identity) -> str:
    swarm = f" in swarm `{config.swarm}`" if config.swarm else ""
    return (
        f"You are {me.name}, a {config.role} agent{swarm}. Your git identity is "
        f"{me.name} <{me.email}>. Other agents are separate people with their own identities."
    )


def read_memory(memory_dir: Path) -> str:
    path = memory_dir / "MEMORY.md"
    try:
        text = path.read_text()
    except OSError:
        return "(MEMORY.md is empty)"
    if len(text) > MEMORY_CHARS:
        text = text[:MEMORY_CHARS] + f"\n[... cut: MEMORY.md has {len(text)} characters; keep it short]"
    return text.strip() or "(MEMORY.md is empty)"


def system_prompt(config: AgentConfig, me: Identity) -> str:
    rules = HOUSE_RULES.format(work=config.work_dir, name=me.name, email=me.email)
    return "\n\n".join(
        [
            identity_banner(config, me),
            role_template(config),
            rules,
            "# Your memory (MEMORY.md)\n\n" + read_memory(config.memory_dir),
        ]
    )


def describe(event: dict[str, Any]) -> str:
    kind = event.get("kind") or event.get("reason") or "event"
    where = f" in {event['channel']}" if event.get("channel") else ""
    sender = f" from {event['sender']}" if event.get("sender") else ""
    ref = f" (message {event['message_id']})" if event.get("message_id") else ""
    return f"[{kind}]{sender}{where}{ref}: {event.get('text', '')}"


def wake_message(events: list[dict[str, Any]]) -> str:
    """The user message that wakes the agent: a readable list, then the same events as JSON."""
    lines = [f"You were woken by {len(events)} new event(s):"]
    lines += [f"{i}. {describe(e)}" for i, e in enumerate(events, 1)]
    lines.append("Act on them with your tools, then end your turn.")
    lines.append(EVENTS_OPEN + "\n" + json.dumps(events, ensure_ascii=False) + "\n" + EVENTS_CLOSE)
    return "\n".join(lines)


def parse_events(text: str) -> list[dict[str, Any]] | None:
    """The events of a wake message (what ``wake_message`` wrote), or None if it is not one."""
    start = text.rfind(EVENTS_OPEN)
    end = text.rfind(EVENTS_CLOSE)
    if start < 0 or end < start:
        return None
    try:
        events = json.loads(text[start + len(EVENTS_OPEN) : end])
    except ValueError:
        return None
    return events if isinstance(events, list) else None
