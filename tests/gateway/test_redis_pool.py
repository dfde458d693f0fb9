"""The gateway's Redis pool: commands written in the caller's task, under the same write timeout."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.asyncio import connection as redis_connection
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.config import GatewaySettings
from gateway.metrics import GatewayMetrics
from gateway.redis_pool import InlineWrites, RedisPool, connect_redis
from orchestrator.local.embedded_redis import EmbeddedRedis


@pytest.fixture
def own_redis(short_tmp: Path) -> Iterator[EmbeddedRedis]:
    """A redis-server of this test's own: it is stopped (SIGSTOP) under a write."""
    server = EmbeddedRedis(short_tmp / "r")
    server.ensure_running()
    try:
        yield server
    finally:
        if (pid := server.pid) is not None:
            os.kill(pid, signal.SIGCONT)
        server.release()


async def test_commands_are_written_without_a_task_of_their_own(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py's own path runs each write as a task through ``asyncio.wait_for``: never taken here."""

    def no_task(*_: object, **__: object) -> None:
        raise AssertionError("a command was written through asyncio.wait_for")

    monkeypatch.setattr(redis_connection.asyncio, "wait_for", no_task)
    settings = GatewaySettings(redis_url=clean_redis)
    redis = connect_redis(settings, GatewayMetrics())
    try:
        assert isinstance(redis.connection_pool, RedisPool)
        await redis.set("k", "v")
        assert await redis.get("k") == "v"
        async with redis.pipeline(transaction=True) as pipe:
            pipe.incr("n").incr("n")
            assert await pipe.execute() == [1, 2]
    finally:
        await redis.aclose()


async def test_a_write_that_cannot_finish_times_out_and_the_pool_recovers(own_redis: EmbeddedRedis) -> None:
    """Redis stopped: a write bigger than the socket's buffers blocks, then fails with redis'
    TimeoutError within the socket timeout (the connection dropped); once Redis runs again, the next
    command works."""
    pool = RedisPool(
        metrics=GatewayMetrics(),
        connection_class=redis_connection.UnixDomainSocketConnection,
        path=str(own_redis.socket_path),
        socket_timeout=1.0,
        max_connections=2,
        timeout=5,
    )
    assert issubclass(pool.connection_class, InlineWrites)
    redis = Redis(connection_pool=pool)
    try:
        await redis.ping()
        pid = own_redis.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(RedisTimeoutError):
                await asyncio.wait_for(redis.set("big", b"x" * (64 << 20)), 60)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert await redis.ping()
        await redis.set("small", "ok")
        assert await redis.get("small") == b"ok"
    finally:
        await redis.aclose()
