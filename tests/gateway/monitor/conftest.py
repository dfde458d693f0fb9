"""Fixtures of the monitor suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from monitor_kit import MonitorGateway


@pytest.fixture
def mon_gateway(clean_redis: str, short_tmp: Path) -> Iterator[MonitorGateway]:
    gw = MonitorGateway(short_tmp / "home", clean_redis)
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()
