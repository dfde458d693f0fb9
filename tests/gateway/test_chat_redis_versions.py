"""The chat core on both Redis lines we support: the bundled 6.2 and a system 7.x."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from redis.asyncio import Redis

from gateway.chat import ChatError, ChatService
from gateway.config import GatewaySettings
from gateway.metrics import GatewayMetrics
from gateway.principals import PrincipalKind, PrincipalStore
from gateway.redis_compat import server_version
from orchestrator.local.embedded_redis import EmbeddedRedis, bundled_redis_server


def binaries() -> list:
    found = [pytest.param(bundled_redis_server(), id="bundled-6.2")]
    system = shutil.which("redis-server", path="/usr/bin:/usr/local/bin")
    if system:
        found.append(pytest.param(Path(system), id="system"))
    else:
        found.append(pytest.param(None, id="system", marks=pytest.mark.skip(reason="no system redis-server")))
    return found


@pytest.mark.parametrize("binary", binaries())
async def test_chat_core(binary: Path, short_tmp: Path) -> None:
    server = EmbeddedRedis(short_tmp / "r", binary=binary)
    url = server.ensure_running()
    redis = Redis.from_url(url, decode_responses=True)
    try:
        major, minor, _ = await server_version(redis)
        assert (major, minor) >= (6, 2)
        settings = GatewaySettings(redis_url=url)
        principals = PrincipalStore(redis, "test")
        chat = ChatService(redis, principals, settings, GatewayMetrics())
        await chat.ensure_default_channels()
        alice, _ = await principals.create("alice", PrincipalKind.agent)
        bob, _ = await principals.create("bob", PrincipalKind.agent)
        root = await chat.post(alice, "general", "hello @bob")
        reply = await chat.post(bob, "general", "hi", reply_to=root.id)
        assert reply.thread == root.id
        assert [m.text for m in await chat.thread(bob, "general", root.id)] == ["hello @bob", "hi"]
        assert [m.id for m in await chat.history(bob, "general", after=root.id)] == [reply.id]
        assert [m.id for m in await chat.history(bob, "general", before=reply.id)] == [root.id]
        waiter = asyncio.create_task(chat.inbox(alice, wait=10))
        items = [i.reason for i in await chat.inbox(bob)]
        assert items == ["mention"]
        await chat.post_dm(bob, "alice", "psst")
        assert [i.reason for i in await asyncio.wait_for(waiter, 5)] in (["reply", "dm"], ["reply"])
        with pytest.raises(ChatError):
            await chat.post(alice, "general", "@nobody")
    finally:
        await redis.aclose()
        server.release()


@pytest.mark.parametrize("binary", binaries())
async def test_a_deduplicated_post_lands_once(binary: Path, short_tmp: Path) -> None:
    """A sender that retries a post after a crash (same dedupe key) posts once; the key is scoped to
    the sender, so another principal cannot pre-empt it."""
    server = EmbeddedRedis(short_tmp / "r", binary=binary)
    url = server.ensure_running()
    redis = Redis.from_url(url, decode_responses=True)
    try:
        principals = PrincipalStore(redis, "test")
        chat = ChatService(redis, principals, GatewaySettings(redis_url=url), GatewayMetrics())
        await chat.ensure_default_channels()
        alice, _ = await principals.create("alice", PrincipalKind.agent)
        bob, _ = await principals.create("bob", PrincipalKind.agent)
        first = await chat.post_dm(alice, "bob", "job j1 done", dedupe="job-notice:j1")
        again = await chat.post_dm(alice, "bob", "job j1 done", dedupe="job-notice:j1")
        assert again.id == first.id
        other = await chat.post_dm(bob, "alice", "mine", dedupe="job-notice:j1")
        assert other.id != first.id
        texts = [m.text for m in await chat.history(bob, first.channel)]
        assert texts.count("job j1 done") == 1 and "mine" in texts
        assert [i.text for i in await chat.inbox(bob)] == ["job j1 done"]
    finally:
        await redis.aclose()
        server.release()
