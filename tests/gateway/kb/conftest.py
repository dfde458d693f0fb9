"""Fixtures of the knowledge-base suites: one real gateway per module (forge with its gate, board, kb)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_sync
from kbkit import KBGateway

AGENTS = ("alice", "bob", "carol")


@pytest.fixture(scope="module")
def kb_gw(redis_url: str) -> Iterator[KBGateway]:
    """One gateway per module on a flushed Redis; agents alice, bob, carol and worker1."""
    client = redis_sync.Redis.from_url(redis_url)
    client.flushall()
    client.close()
    tmp = Path(tempfile.mkdtemp(prefix="kskb"))
    gw = KBGateway(tmp / "home", redis_url)
    gw.start()
    gw.tokens = {n: gw.add_principal(n) for n in AGENTS}
    gw.tokens["worker1"] = gw.add_principal("worker1", "worker")
    try:
        yield gw
    finally:
        gw.stop()
        shutil.rmtree(tmp, ignore_errors=True)
