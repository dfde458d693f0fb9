"""Fixtures of the search suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from search_kit import SearchGateway


@pytest.fixture
def search_gw(clean_redis: str, short_tmp: Path) -> Iterator[SearchGateway]:
    gw = SearchGateway(short_tmp / "home", clean_redis)
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()
