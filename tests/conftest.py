"""Fixtures shared by every suite: a real redis-server and real gateway processes."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_sync

from kstest.gateway import GatewayThread
from orchestrator.local.embedded_redis import EmbeddedRedis


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """One private redis-server (unix socket, AOF) for the whole run; tests flush it."""
    home = Path(tempfile.mkdtemp(prefix="ksr"))  # short: unix socket paths are limited to ~107 bytes
    server = EmbeddedRedis(home)
    url = server.ensure_running()
    try:
        yield url
    finally:
        server.release()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def clean_redis(redis_url: str) -> str:
    client = redis_sync.Redis.from_url(redis_url)
    client.flushall()
    client.close()
    return redis_url


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short temporary dir (for unix sockets), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="kst"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def gateway(clean_redis: str, short_tmp: Path) -> Iterator[GatewayThread]:
    """A fresh gateway (real uvicorn in a thread) on an empty Redis, with an operator token.

    Tests that kill or restart the gateway process use ``kstest.gateway.GatewayProcess`` instead."""
    gw = GatewayThread(short_tmp / "home", clean_redis)
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()
