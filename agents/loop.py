"""The agent loop: sleep on the inbox, wake on events, let the model act through tools, sleep again.

Event-driven: one server-side blocking ``GET /api/inbox?wait=`` at a time (no polling); heartbeats
run on their own timer task (``agents.pulse``). A wake appends the events to the conversation, then
repeats model call -> run every ``tool_use`` block -> tool results, until the model ends its turn
(or stops for another reason), the per-wake budget (turns, tokens) is spent, or the gateway's proxy
says the LLM budget is exhausted. Everything goes into the transcript (``agents.history``).

Entry points: ``run_agent(config)`` (async) and ``serve(config)`` (blocking, signal-aware). The session
with the gateway (client, identity, inbox) is ``agents.session``, shared with ``agents.claude_code``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from typing import Any

from agents.config import AgentConfig
from agents.history import Context, Transcript
from agents.models import Block, BudgetExhausted, Model, ModelError
from agents.prompt import Identity, describe, system_prompt, wake_message
from agents.pulse import HeartbeatSink, Pulse
from agents.session import Inbox, gateway_client, identify, prepare_dirs, quiet_http_logs, retrying
from agents.timeline import TimelineReporter, clip
from agents.tools import LocalTools, Toolbox
from agents.tools.mcp import McpTools
from gateway.client import AsyncGatewayClient

log = logging.getLogger("kswarm.agent")
NOT_RUN = "not run: your reply was cut at max_tokens, so this call's input may be incomplete"
# A stopped agent (SIGTERM/SIGINT) is gone within this: the orchestrator waits longer before SIGKILL.
STOP_GRACE_S = 6.0


@dataclass(frozen=True)
class WakeOutcome:
    """Why a wake ended: end_turn (or another model stop), max_turns, max_wake_tokens,
    budget_exhausted or model_error; with the model calls and tokens it took."""

    reason: str
    turns: int
    tokens: int


def build_model(config: AgentConfig) -> Model:
    if config.kind == "scripted":
        from agents.models.scripted import ScriptedModel

        return ScriptedModel()
    from agents.models.anthropic_model import AnthropicModel

    return AnthropicModel(config)


class AgentLoop:
    """One agent's wakes: model, tools, context and transcript, with its identity from the gateway."""

    def __init__(
        self,
        config: AgentConfig,
        model: Model,
        tools: Toolbox,
        me: Identity,
        pulse: Pulse | None = None,
        timeline: TimelineReporter | None = None,
    ) -> None:
        self.config = config
        self.model = model
        self.tools = tools
        self.me = me
        self.pulse = pulse
        self.transcript = Transcript(config.history_dir, sink=timeline.record if timeline else None)
        self.context = Context(config.history_dir, persist=config.carry_context)
        self.budget_exhausted = False

    def status(self, state: str, doing: str = "") -> None:
        if self.pulse is not None:
            self.pulse.set(state, doing)

    async def wake(self, events: list[dict[str, Any]]) -> WakeOutcome:
        """Handle the events that woke the agent; returns when its turn ends."""
        self.transcript.write("wake", events=events)
        self.status("working", "; ".join(describe(e) for e in events)[:200])
        if not self.config.carry_context and self.context.messages:
            self.context.messages, self.context.logged = [], 0
        self.context.add_user(wake_message(events))
        turns = tokens = 0
        reason = "end_turn"
        try:
            while True:
                if turns >= self.config.max_turns:
                    reason = "max_turns"
                    break
                if self.config.max_wake_tokens is not None and tokens >= self.config.max_wake_tokens:
                    reason = "max_wake_tokens"
                    break
                reply_stop, used = await self.step()
                turns += 1
                tokens += used
                if reply_stop is not None:
                    reason = reply_stop
                    break
            self.budget_exhausted = False
        except BudgetExhausted as exc:
            reason = "budget_exhausted"
            self.budget_exhausted = True
            self.transcript.write("error", kind="budget_exhausted", message=str(exc), status=exc.status)
            log.warning("LLM budget exhausted; sleeping until the next event: %s", exc)
        except ModelError as exc:
            reason = "model_error"
            self.transcript.write("error", kind="model_error", message=str(exc), status=exc.status)
            log.error("model error; the wake ends: %s", exc)
        self.context.save()
        self.transcript.write("stop", reason=reason, turns=turns, tokens=tokens)
        after = (
            f"last wake ended {time.strftime('%H:%M:%SZ', time.gmtime())}: {reason}, {turns} model call(s)"
        )
        self.status("budget-exhausted" if self.budget_exhausted else "idle", f"waiting for messages; {after}")
        return WakeOutcome(reason, turns, tokens)

    async def step(self) -> tuple[str | None, int]:
        """One model call and its tool calls; the stop reason when the turn ended, else None."""
        system = system_prompt(self.config, self.me)
        specs = self.tools.specs()
        if self.context.tokens(system, specs) > self.config.compact_at_tokens:
            self.status("working", "compacting the context")
            await self.context.compact(
                self.model, self.config.keep_messages, self.config.max_tokens, self.transcript
            )
        self.transcript.request(
            self.model.name,
            system,
            self.context.unlogged(),
            len(self.context.messages),
            specs,
            max_tokens=self.config.max_tokens,
            est_tokens=self.context.tokens(system, specs),
        )
        started = time.monotonic()
        reply = await self.model.complete(system, self.context.messages, specs, self.config.max_tokens)
        self.transcript.write(
            "response",
            content=reply.content,
            stop_reason=reply.stop_reason,
            usage=reply.usage.as_dict(),
            model=reply.model,
            latency_s=round(time.monotonic() - started, 3),
        )
        before = len(self.context.messages)
        fully_logged = self.context.logged == before
        self.context.add_assistant(reply.content, reply.usage)
        if fully_logged and len(self.context.messages) == before + 1:
            self.context.logged = before + 1  # the reply itself is in the response record
        uses = reply.tool_uses()
        if reply.stop_reason == "pause_turn":
            return None, reply.usage.total
        if not uses:
            return reply.stop_reason or "end_turn", reply.usage.total
        results = [await self.run_tool(use, cut=reply.stop_reason == "max_tokens") for use in uses]
        self.context.add_user(results)
        return None, reply.usage.total

    async def run_tool(self, use: Block, cut: bool = False) -> Block:
        name, arguments = use["name"], use.get("input")
        brief = " ".join(str(clip(arguments, 120)).split())
        self.status("working", f"tool {name} {brief}")
        self.transcript.write("tool_call", id=use["id"], name=name, input=arguments)
        started = time.monotonic()
        if cut:
            text, is_error = NOT_RUN, True
        else:
            result = await self.tools.call(name, arguments)
            text, is_error = result.text, result.is_error
        self.transcript.write(
            "tool_result",
            id=use["id"],
            name=name,
            content=text,
            is_error=is_error,
            seconds=round(time.monotonic() - started, 3),
        )
        block: Block = {"type": "tool_result", "tool_use_id": use["id"], "content": text}
        if is_error:
            block["is_error"] = True
        return block


async def run_agent(
    config: AgentConfig, heartbeat: HeartbeatSink | None = None, model: Model | None = None
) -> None:
    """Run one agent until cancelled: identify, open the tools, then sleep on the inbox and wake."""
    if config.runtime == "claude-code":
        from agents.claude_code import run_claude_code

        await run_claude_code(config, heartbeat)
        return
    prepare_dirs(config)
    model = model or build_model(config)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(model.aclose)
        gateway = await stack.enter_async_context(gateway_client(config))
        me = await identify(gateway, config)
        pulse = await stack.enter_async_context(
            Pulse(heartbeat or gateway, config.heartbeat_s, config.heartbeat_log_s)
        )
        timeline = (
            await stack.enter_async_context(TimelineReporter(gateway)) if config.report_timeline else None
        )
        mcp = McpTools(config, config.output_limit)
        await retrying("MCP tools/list", mcp.open, config.heartbeat_s)
        stack.push_async_callback(mcp.close)
        local = LocalTools(config.work_dir, config.memory_dir, config.bash_timeout_s, config.output_limit)
        loop = AgentLoop(config, model, Toolbox(local, mcp), me, pulse, timeline)
        loop.transcript.write("start", name=me.name, model=model.name, tools=loop.tools.names())
        log.info("agent %s up: model %s, %d tools", me.name, model.name, len(loop.tools.names()))
        pulse.set("idle", "waiting for messages")
        await sleep_and_wake(loop, gateway, config)


async def sleep_and_wake(loop: AgentLoop, gateway: AsyncGatewayClient, config: AgentConfig) -> None:
    inbox = Inbox(gateway, config)  # at least once: acknowledged after the wake that handled them
    while True:
        items = await inbox.next()
        outcome = await loop.wake(items)
        await inbox.handled(items)
        log.info(
            "wake ended: %s after %d model call(s), %d tokens", outcome.reason, outcome.turns, outcome.tokens
        )


def serve(config: AgentConfig | None = None) -> int:
    """Blocking entry for ``python -m agents``: run until SIGTERM/SIGINT, then exit 0."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    quiet_http_logs()
    config = config or AgentConfig.load()

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        running = asyncio.get_running_loop()

        def stop() -> None:
            # Cancel the agent, and bound its way out: each step of it is bounded (the last timeline
            # flush, the MCP session's close), and this bounds them all, so a stop always ends.
            task.cancel()
            running.call_later(STOP_GRACE_S, leave_now)

        def leave_now() -> None:
            log.warning("stopping took over %.0f s: exiting without finishing the clean-up", STOP_GRACE_S)
            logging.shutdown()
            os._exit(0)

        for sig in (signal.SIGTERM, signal.SIGINT):
            running.add_signal_handler(sig, stop)
        with contextlib.suppress(asyncio.CancelledError):
            await run_agent(config)

    asyncio.run(main())
    return 0
