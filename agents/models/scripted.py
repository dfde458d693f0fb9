"""The ``scripted`` model: an offline, deterministic demo policy -- not intelligence.

It drives the very same loop and tools as a real model: it answers with ``tool_use`` blocks for the
gateway's MCP tools and the local tools, one call per reply, and ends its turn when its plan is done.
What it does is a small rule table keyed by the kind of event that woke the agent (the inbox item's
``kind``, else its ``reason``): each rule turns one event into a list of planned steps. The demo
passes a bigger table (``orchestrator/demo/policy.py``: tasks, kernels, PRs, jobs, reviews); the loop
does not change.

It is stateless: each call re-reads the conversation -- the events of the last wake message and the
tool results after it -- and replays its plan to find the next step, so a restarted agent continues
where it stopped and two runs on the same events make the same calls.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agents.models import Message, ModelReply, ToolSpec, Usage
from agents.models.conversation import SUMMARY_SYSTEM, blocks, estimate_tokens, render
from agents.prompt import parse_events

ACK = "Got it"  # scripted answers start with this; a scripted agent never answers one (no ping-pong)
SHA_RE = re.compile(r"^[0-9a-f]{7,40}$", re.MULTILINE)


@dataclass(frozen=True)
class Call:
    """One planned tool call."""

    name: str
    input: dict[str, Any]


@dataclass
class Scratch:
    """What the plan can see: the wake's events and the results of the calls made so far."""

    events: list[dict[str, Any]]
    calls: list[Call] = field(default_factory=list)
    results: list[str] = field(default_factory=list)

    def result_of(self, name: str) -> str | None:
        for call, result in zip(reversed(self.calls), reversed(self.results), strict=False):
            if call.name == name:
                return result
        return None

    def identity(self) -> dict[str, Any] | None:
        raw = self.result_of("whoami")
        try:
            found = json.loads(raw) if raw else None
        except ValueError:
            return None
        return found if isinstance(found, dict) and "name" in found else None

    def commit(self) -> str | None:
        raw = self.result_of("bash") or ""
        found = SHA_RE.findall(raw)
        return found[-1] if found else None


Step = Callable[[Scratch], Call | None]  # None: nothing to do at this step (skipped)
Rule = Callable[[dict[str, Any]], list[Step]]


def need_identity(s: Scratch) -> Call | None:
    return Call("whoami", {}) if s.identity() is None else None


def commit_command(s: Scratch, path: str, message: str) -> str:
    me = s.identity() or {}
    name, email = shlex.quote(str(me.get("name", ""))), shlex.quote(str(me.get("email", "")))
    return "\n".join(
        [
            "set -e",
            # Our own repository, never one that merely encloses the work dir.
            '[ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$(pwd -P)" ] || git init -q',
            f"git add -- {shlex.quote(path)}",
            f"git -c user.name={name} -c user.email={email} commit -q -m {shlex.quote(message)}",
            "git rev-parse --short HEAD",
        ]
    )


def note_path(event: dict[str, Any]) -> str:
    sender = re.sub(r"[^a-z0-9-]", "_", str(event.get("sender", "someone")))
    ident = re.sub(r"[^0-9A-Za-z]", "_", str(event.get("message_id") or event.get("id") or "0"))
    return f"notes/{sender}-{ident}.md"


def answer_dm(event: dict[str, Any]) -> list[Step]:
    """A DM: note it in a file, commit the file as ourselves, answer the sender by DM."""
    sender, text = event.get("sender", ""), event.get("text", "")
    if text.startswith(ACK):
        return []
    path = note_path(event)
    note = f"# Message from {sender}\n\n{text}\n"
    return [
        need_identity,
        lambda s: Call("write_file", {"path": path, "content": note}),
        lambda s: Call("bash", {"command": commit_command(s, path, f"Note the message from {sender}")}),
        lambda s: Call(
            "chat_post",
            {"to": sender, "text": f"{ACK}, {sender}: noted in {path}, commit {s.commit() or '(none)'}."},
        ),
    ]


def answer_mention(event: dict[str, Any]) -> list[Step]:
    """A mention in a channel: answer in the message's thread."""
    sender, text = event.get("sender", ""), event.get("text", "")
    if text.startswith(ACK) or not event.get("channel"):
        return []
    reply = {
        "channel": event["channel"],
        "reply_to": event.get("thread") or event.get("message_id"),
        "text": f"{ACK}, {sender}: I saw your message.",
    }
    return [lambda s: Call("chat_post", {k: v for k, v in reply.items() if v})]


def default_rules() -> dict[str, Rule]:
    """The demo's rule table: event kind -> rule. Replies and notices need no action."""
    return {"dm": answer_dm, "mention": answer_mention}


class ScriptedModel:
    """``Model`` that follows the rule table; usage is estimated at four characters per token."""

    def __init__(self, rules: Mapping[str, Rule] | None = None, name: str = "scripted") -> None:
        self.name = name
        self.rules = dict(default_rules() if rules is None else rules)

    async def complete(
        self, system: str, messages: list[Message], tools: list[ToolSpec], max_tokens: int
    ) -> ModelReply:
        if system == SUMMARY_SYSTEM:
            content = [{"type": "text", "text": self.summarise(messages)}]
            return self.reply(content, "end_turn", system, messages, tools)
        scratch = self.scratch(messages)
        if scratch is None:
            return self.reply(self.text("Nothing to act on."), "end_turn", system, messages, tools)
        offered = {t["name"] for t in tools}
        call = self.next_call(scratch)
        if call is None:
            done = f"Done: handled {len(scratch.events)} event(s) with {len(scratch.calls)} tool call(s)."
            return self.reply(self.text(done), "end_turn", system, messages, tools)
        if call.name not in offered:
            text = f"I cannot go on: the tool {call.name} is not offered to me."
            return self.reply(self.text(text), "end_turn", system, messages, tools)
        ident = f"toolu_scripted_{len(messages):04d}_{len(scratch.calls):03d}"
        block = {"type": "tool_use", "id": ident, "name": call.name, "input": call.input}
        return self.reply([block], "tool_use", system, messages, tools)

    # -- the plan ----------------------------------------------------------------------------

    def scratch(self, messages: list[Message]) -> Scratch | None:
        """Events of the last wake message, and the calls and results after it."""
        for w in range(len(messages) - 1, -1, -1):
            if messages[w]["role"] != "user":
                continue
            events = None
            for b in blocks(messages[w]["content"]):
                if b.get("type") == "text" and (found := parse_events(b["text"])) is not None:
                    events = found
            if events is None:
                continue
            scratch = Scratch(events)
            results: dict[str, str] = {}
            for m in messages[w + 1 :]:
                for b in blocks(m["content"]):
                    if b.get("type") == "tool_use":
                        scratch.calls.append(Call(b["name"], b.get("input") or {}))
                    elif b.get("type") == "tool_result":
                        content = b.get("content")
                        results[b["tool_use_id"]] = (
                            content if isinstance(content, str) else json.dumps(content)
                        )
            ids = [
                b["id"]
                for m in messages[w + 1 :]
                for b in blocks(m["content"])
                if b.get("type") == "tool_use"
            ]
            scratch.results = [results.get(i, "") for i in ids]
            return scratch
        return None

    def steps(self, events: list[dict[str, Any]]) -> list[Step]:
        plan: list[Step] = []
        for event in events:
            rule = self.rules.get(str(event.get("kind") or event.get("reason")))
            if rule is not None:
                plan.extend(rule(event))
        return plan

    def next_call(self, scratch: Scratch) -> Call | None:
        """Replay the plan against the calls already made; the first step not yet made is next."""
        done = len(scratch.calls)
        view = Scratch(scratch.events)
        made = 0
        for step in self.steps(scratch.events):
            call = step(view)
            if call is None:
                continue
            if made == done:
                return call
            view.calls.append(scratch.calls[made])
            view.results.append(scratch.results[made])
            made += 1
        return None

    # -- replies -----------------------------------------------------------------------------

    @staticmethod
    def text(text: str) -> list[dict[str, Any]]:
        return [{"type": "text", "text": text}]

    def reply(
        self,
        content: list[dict[str, Any]],
        stop: str,
        system: str,
        messages: list[Message],
        tools: list[ToolSpec],
    ) -> ModelReply:
        usage = Usage(
            input_tokens=estimate_tokens(system, messages, tools), output_tokens=estimate_tokens(content)
        )
        return ModelReply(content=content, stop_reason=stop, usage=usage, model=self.name)

    @staticmethod
    def summarise(messages: list[Message]) -> str:
        text = render(messages)
        lines = [line for line in text.splitlines() if line.startswith(("assistant called", "user:"))]
        head = f"Scripted summary of {len(text)} characters of conversation; the last actions were:"
        return "\n".join([head, *(line[:200] for line in lines[-10:])])

    async def aclose(self) -> None:
        return None
