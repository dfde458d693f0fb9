"""Fixtures of the UI suites: a gateway with the UI plugin, and Chromium when the machine has it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import gateway

# Without the repo root on sys.path (``.venv/bin/pytest``; the editable install is a meta-path finder),
# tests/ on sys.path makes ``gateway`` a namespace package rooted at tests/gateway, and this very
# directory then shadows ``gateway.ui``. Point the namespace at the real package too; a no-op once
# pyproject's pytest options say ``pythonpath = ["."]`` (or under ``python -m pytest``).
if getattr(gateway, "__file__", None) is None:
    gateway.__path__.append(str(Path(__file__).resolve().parents[3] / "gateway"))

from jobs_kit import JobsUiGateway
from monitor_ui_kit import MonitorUiGateway
from ui_kit import CHROMIUM, ScanSearchUiGateway, UiGateway


@pytest.fixture
def ui_gateway(clean_redis: str, short_tmp: Path) -> Iterator[UiGateway]:
    """A fresh gateway (real uvicorn in a thread) with the UI and forge plugins and an operator token."""
    gw = UiGateway(short_tmp / "home", clean_redis)
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture
def scan_ui(clean_redis: str, short_tmp: Path) -> Iterator[UiGateway]:
    """Like ``ui_gateway`` without the search plugin (search falls back to the recent-history scan)."""
    gw = ScanSearchUiGateway(short_tmp / "home", clean_redis)
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture
def jobs_ui(clean_redis: str, short_tmp: Path) -> Iterator[JobsUiGateway]:
    """Like ``ui_gateway``, with the real job runner serving pools cpu, gpu-h100 (node0: 8 devices, node1: 2)
    and npu-910c (8 devices); ``jobs_kit.seed_jobs`` fills them."""
    gw = JobsUiGateway(short_tmp / "home", clean_redis)
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's Chromium and the Playwright driver; skips (saying what to install) when either is missing."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("browser tests need Playwright for Python: pip install playwright (no browser download)")
    if not CHROMIUM.exists():
        pytest.skip(f"browser tests need Debian's Chromium at {CHROMIUM}: apt-get install -y chromium")
    return CHROMIUM


@pytest.fixture
def mon_ui(clean_redis: str, short_tmp: Path) -> Iterator[MonitorUiGateway]:
    """A UI gateway with the monitor (thresholds in seconds), the search index and the real job runner."""
    gw = MonitorUiGateway(short_tmp / "home", clean_redis)
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()
