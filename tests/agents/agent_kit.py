"""Helpers for the agent-loop tests: configs, a gateway with the LLM proxy, waiting on the transcript."""

from __future__ import annotations

import asyncio
import inspect
import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis

from agents.config import AgentConfig
from gateway.app import create_app
from gateway.config import GatewaySettings
from gateway.llm.config import LLMProxySettings
from gateway.llm.plugin import LLMProxyPlugin
from gateway.principals import PrincipalKind, PrincipalStore
from gateway.server import serve
from kstest.gateway import free_port


def agent_config(
    tmp: Path, token: str, *, url: str | None = None, socket: Path | None = None, **kw: Any
) -> AgentConfig:
    """An agent config with its own dirs under ``tmp`` (created), reaching the gateway by URL or socket."""
    for d in ("work", "memory", "history"):
        (tmp / d).mkdir(parents=True, exist_ok=True)
    fields: dict[str, Any] = {
        "name": "bot",
        "swarm": "test",
        "token": token,
        "gateway_url": None if socket else url,
        "gateway_socket": socket,
        "work_dir": tmp / "work",
        "memory_dir": tmp / "memory",
        "history_dir": tmp / "history",
        "heartbeat_s": 0.5,
        "inbox_wait_s": 2,
        "bash_timeout_s": 20,
        **kw,
    }
    return AgentConfig.model_validate(fields)


def git(cwd: Path, *args: str) -> str:
    """``git ARGS`` in ``cwd``; its stripped output."""
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def records(config: AgentConfig, kind: str | None = None) -> list[dict[str, Any]]:
    path = config.history_dir / "transcript.jsonl"
    if not path.exists():
        return []
    found = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in found if kind is None or r["type"] == kind]


async def wait_for(
    what: str, check: Callable[[], Any], within: float = 30.0, task: asyncio.Task | None = None
) -> Any:
    """Poll ``check`` (a test-side condition, not the agent) until truthy; fail with ``what``."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if task is not None and task.done():
            task.result()  # surface the agent's crash
            raise AssertionError(f"the agent stopped before: {what}")
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for: {what}")


def stops(config: AgentConfig, n: int = 1) -> Callable[[], list[dict[str, Any]] | None]:
    def check() -> list[dict[str, Any]] | None:
        found = records(config, "stop")
        return found if len(found) >= n else None

    return check


async def stop_task(task: asyncio.Task) -> None:
    task.cancel()
    try:
        await asyncio.wait_for(task, 15)
    except asyncio.CancelledError:
        pass


def run_in_thread(coro: Any) -> Any:
    """``asyncio.run`` in a fresh thread: usable from sync code and from inside a running loop."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(asyncio.run(coro)))
    thread.start()
    thread.join(30)
    return out[0]


class ProxyGateway:
    """The gateway app with the LLM proxy plugin (the default plugins may not include it yet),
    served on TCP and its unix socket from a thread."""

    def __init__(self, redis_url: str, home: Path, llm: LLMProxySettings) -> None:
        self.settings = GatewaySettings(redis_url=redis_url, home=home, port=free_port(), swarm="test")
        self.operator_token = run_in_thread(self._create("operator", PrincipalKind.operator))
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stop_event: asyncio.Event | None = None
        ready = threading.Event()

        async def main() -> None:
            self.loop, self.stop_event = asyncio.get_running_loop(), asyncio.Event()
            app = create_app(self.settings, plugins=[LLMProxyPlugin(llm)])
            started = asyncio.Event()
            asyncio.get_running_loop().create_task(started.wait()).add_done_callback(lambda _: ready.set())
            await serve(app, self.settings, ready=started, stop=self.stop_event)

        self.thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
        self.thread.start()
        assert ready.wait(20), "gateway did not start"

    async def _create(self, name: str, kind: PrincipalKind) -> str:
        redis = Redis.from_url(self.settings.redis_url, decode_responses=True)
        try:
            return (await PrincipalStore(redis, "test").create(name, kind))[1]
        finally:
            await redis.aclose()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.settings.port}"

    @property
    def socket_path(self) -> Path:
        return self.settings.socket_path()

    def add_principal(self, name: str) -> str:
        return run_in_thread(self._create(name, PrincipalKind.agent))

    def stop(self) -> None:
        if self.loop is not None and self.stop_event is not None:
            self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(15)


def api(url: str, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30, trust_env=False
    )


async def dm(url: str, token: str, to: str, text: str) -> dict[str, Any]:
    async with api(url, token) as client:
        reply = await client.post(f"/api/dms/{to}/messages", json={"text": text})
        reply.raise_for_status()
        return reply.json()


async def channel_messages(url: str, token: str, channel: str) -> list[dict[str, Any]]:
    async with api(url, token) as client:
        reply = await client.get(f"/api/channels/{channel}/messages")
        if reply.status_code == 404:
            return []
        reply.raise_for_status()
        return reply.json()["messages"]


def replay(found: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Rebuild, from the transcript alone, the messages of every model request, in order."""
    context: list[dict[str, Any]] = []
    sent: list[list[dict[str, Any]]] = []
    for r in found:
        if r["type"] == "request":
            context[r["from_index"] :] = r["messages_new"]
            assert len(context) == r["n_messages"], r
            sent.append(json.loads(json.dumps(context)))
        elif r["type"] == "response":
            context.append({"role": "assistant", "content": r["content"]})
        elif r["type"] == "compaction":
            context = list(r["messages"])
    return sent
