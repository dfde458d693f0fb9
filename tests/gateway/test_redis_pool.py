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
from gateway.redis_pool import InlineWrites, RedisPool, connect_redis, inline_writes
from kstest.waiting import until
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


PACKING_CASES = [
    (
        "EVALSHA",
        "a" * 40,
        2,
        "ks:k1",
        "ks:k2",
        10_000,
        0.1,
        1e-07,
        -0.0,
        12345678901234567890,
        "é",
        b"\x00\xff",
    ),
    ("XINFO STREAM", "ks:events"),  # a multi-word command name: redis-py splits it
    ("SET", "k", memoryview(b"sent uncopied")),
    ("SET", "k", bytearray(b"x")),
    ("SET", "k", float("nan")),
    ("SET", "k", True),  # refused: redis-py wants bools spelled out
    ("SET", "k", None),
    ("SET", "k", "\ud800"),  # not encodable as UTF-8
]


@pytest.mark.parametrize("args", PACKING_CASES, ids=lambda a: f"{a[0]}-{type(a[-1]).__name__}")
def test_the_pool_packs_every_command_as_redis_py_does(args: tuple) -> None:
    """The pool's connections pack with hiredis in one call where redis-py would encode argument by
    argument: the same bytes on the wire, the same refusals."""
    fast = inline_writes(redis_connection.Connection)(decode_responses=True)
    plain = redis_connection.Connection(decode_responses=True)

    def packed(connection: redis_connection.Connection) -> bytes | type[BaseException]:
        try:
            return b"".join(bytes(chunk) for chunk in connection.pack_command(*args))
        except Exception as exc:  # the refusal's type is what is compared
            return type(exc)

    assert packed(fast) == packed(plain)


def test_a_post_is_packed_in_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of the above: redis-py's argument-by-argument packer is not used for plain arguments."""

    def not_this_way(*_: object) -> None:
        raise AssertionError("packed argument by argument")

    fast = inline_writes(redis_connection.Connection)(decode_responses=True)
    monkeypatch.setattr(redis_connection.HiredisRespSerializer, "pack", not_this_way)
    monkeypatch.setattr(redis_connection.Connection, "_pack_command_python", not_this_way)
    assert fast.pack_command(*PACKING_CASES[0])[0].startswith(b"*12\r\n$7\r\nEVALSHA\r\n")


def small_pool(redis_url: str, size: int = 1) -> RedisPool:
    return RedisPool.from_url(
        redis_url, metrics=GatewayMetrics(), max_connections=size, timeout=10, decode_responses=True
    )


async def test_a_released_connection_goes_to_the_request_waiting_for_it(clean_redis: str) -> None:
    """The pool's short path for a free connection must still hand a released one to a waiter at once
    (a waiter left unnotified would wait out ``redis_pool_wait`` and fail with RedisBusy)."""
    pool = small_pool(clean_redis)
    try:
        held = await pool.get_connection()
        waiter = asyncio.ensure_future(pool.get_connection())
        await until(lambda: bool(getattr(pool._condition, "_waiters", None)), "a request waiting")
        assert not waiter.done()
        await pool.release(held)
        got = await waiter  # within the pool's 10 s wait: a RedisBusy here means nobody was told
        assert got is held and pool.in_use() == 1
        await pool.release(got)
        assert pool.in_use() == 0
    finally:
        await pool.disconnect()


async def test_a_reply_left_unread_never_answers_the_next_command(clean_redis: str) -> None:
    """A connection given back with a reply still unread (a request cancelled mid-command) is
    reconnected before its next use, on the short path as on redis-py's."""
    pool = small_pool(clean_redis)
    redis = Redis(connection_pool=pool)
    try:
        await redis.set("k", "value")
        connection = await pool.get_connection()
        await connection.send_command("PING")  # its PONG is never read
        while not await connection.can_read():  # noqa: ASYNC110 -- no event says the PONG is in
            await asyncio.sleep(0.01)
        await pool.release(connection)
        assert await redis.get("k") == "value"
    finally:
        await redis.aclose()


async def test_a_handler_holding_the_pool_keeps_requests_out(clean_redis: str) -> None:
    """redis-py's maintenance and re-authentication handlers work under the pool's lock: while one
    holds it, a request waits for it, free connection or not."""
    pool = small_pool(clean_redis, size=2)
    try:
        await pool.release(await pool.get_connection())  # one free connection
        async with pool._lock:
            request = asyncio.ensure_future(pool.get_connection())
            for _ in range(20):
                await asyncio.sleep(0)
            assert not request.done()
        connection = await request
        await pool.release(connection)
    finally:
        await pool.disconnect()
