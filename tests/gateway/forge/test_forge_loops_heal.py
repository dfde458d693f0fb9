"""The forge's consumer-group loops (the gate, the hook deliverer) outlive their stream vanishing.

A flushed or replaced Redis (an operator's FLUSHALL, a restore) deletes ``ks:events`` under a blocked
``XREADGROUP``: Redis answers ``UNBLOCKED`` to the blocked read and ``NOGROUP`` to the next ones. Each
loop must create its group again and go on, saying so in one warning, never a traceback per second.
"""

from __future__ import annotations

import logging
import time

import pytest
import redis as redis_sync

from gateway.forge import keys
from gateway.forge.hooks_out import GROUP as HOOKS_GROUP
from kstest.gateway import GatewayThread


def groups(redis_url: str) -> set[str]:
    client = redis_sync.Redis.from_url(redis_url, decode_responses=True)
    try:
        return {g["name"] for g in client.xinfo_groups(keys.EVENTS)} if client.exists(keys.EVENTS) else set()
    finally:
        client.close()


def test_a_flushed_redis_is_healed_by_the_gate_and_the_hooks_without_a_traceback(
    gateway: GatewayThread, caplog: pytest.LogCaptureFixture
) -> None:
    deadline = time.monotonic() + 30
    while groups(gateway.redis_url) != {keys.GATE_GROUP, HOOKS_GROUP}:
        assert time.monotonic() < deadline, f"the loops never made their groups: {groups(gateway.redis_url)}"
        time.sleep(0.05)
    caplog.set_level(logging.WARNING, logger="kswarm.forge")
    client = redis_sync.Redis.from_url(gateway.redis_url)
    try:
        client.flushall()
    finally:
        client.close()
    deadline = time.monotonic() + 30
    while groups(gateway.redis_url) != {keys.GATE_GROUP, HOOKS_GROUP}:
        assert time.monotonic() < deadline, f"the groups were not made again: {groups(gateway.redis_url)}"
        time.sleep(0.05)
    time.sleep(1.5)  # a loop that failed would have logged by now (each blocks 1 s per read)
    forge = [r for r in caplog.records if r.name.startswith("kswarm.forge")]
    assert not [r for r in forge if r.exc_info], "a vanished stream is no crash: " + "; ".join(
        r.getMessage() for r in forge
    )
    said = " ".join(r.getMessage() for r in forge)
    assert "gate: events stream gone" in said and "hooks: events stream gone" in said
