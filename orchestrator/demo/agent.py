"""``python -m orchestrator.demo.agent``: the agent loop with the demo policy and a git bridge.

The same loop as ``python -m agents``, with two additions for the demo:

- a loopback bridge to the gateway's unix socket (``agents.bridge.SocketBridge``), because git speaks
  only TCP and agent containers have no network but their own loopback; its URL reaches the agent's
  bash as ``KSWARM_GIT_URL`` (``$KSWARM_GIT_URL/<org>/<repo>.git``) -- real models use it too;
- for ``model: scripted``, the demo's rules (``orchestrator.demo.policy``) in the scripted model.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal

from agents.bridge import SocketBridge
from agents.config import AgentConfig
from agents.loop import run_agent
from agents.models import Model
from agents.session import quiet_http_logs


def demo_model(config: AgentConfig) -> Model | None:
    """The scripted model with the demo's rules; None lets the loop build a real model."""
    if config.kind != "scripted":
        return None
    from agents.models.scripted import ScriptedModel
    from orchestrator.demo.policy import DemoPolicy, demo_rules

    return ScriptedModel(demo_rules(DemoPolicy.from_env(os.environ), config.role))


async def run(config: AgentConfig) -> None:
    async with contextlib.AsyncExitStack() as stack:
        if config.gateway_socket is not None:
            bridge = await stack.enter_async_context(SocketBridge(config.gateway_socket))
            base = bridge.url
        else:
            base = str(config.gateway_url).rstrip("/")
        # Set before the loop builds its tools: bash inherits this process's environment.
        os.environ["KSWARM_GIT_URL"] = f"{base}/git"
        await run_agent(config, model=demo_model(config))


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    quiet_http_logs()  # as `python -m agents`: no line per heartbeat or inbox wait
    config = AgentConfig.load()

    async def serve() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await run(config)

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
