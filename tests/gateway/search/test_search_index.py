"""The index on its own: a close never blocks the event loop, skips queued work and closes its file."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from gateway.errors import GatewayError
from gateway.search.index import Row, SearchIndex


def open_files_under(root: Path) -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(root)):
            found.append(target)
    return found


def row(i: int) -> Row:
    return Row("general", f"1-{i}", "alice", float(i), "chat", "", None, "", f"message number {i}")


async def test_a_close_skips_the_queued_writes_and_closes_the_database(tmp_path: Path) -> None:
    index = SearchIndex(tmp_path / "messages.sqlite3")
    assert await index.add([row(0)], cursor="1-0") == 1
    assert open_files_under(tmp_path), "the index keeps its database open while in use"
    queued = [asyncio.ensure_future(index.add([row(i)], cursor=f"1-{i}")) for i in range(1, 50)]
    await index.close()
    outcomes = await asyncio.gather(*queued, return_exceptions=True)
    skipped = [o for o in outcomes if isinstance(o, GatewayError)]
    assert all(o.status == 503 for o in skipped)
    assert open_files_under(tmp_path) == []  # the connection closed with the index, not at some GC
    # What was written stands, with its cursor: the rest is indexed again from there.
    again = SearchIndex(tmp_path / "messages.sqlite3")
    try:
        written = await again.count()
        assert written == 50 - len(skipped)
        assert await again.cursor() == f"1-{written - 1}"
    finally:
        await again.close()


async def test_a_call_after_the_close_is_refused_not_run(tmp_path: Path) -> None:
    index = SearchIndex(tmp_path / "messages.sqlite3")
    await index.close()
    with pytest.raises(RuntimeError):  # the pool is shut: nothing can run on it any more
        await index.count()
