"""Test support for the UI: a gateway with the UI (and the forge) plugin, logins, a swarm, a browser."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx

from gateway.plugin import Plugin
from gateway.plugins import default_plugins, replace_plugins, without_plugins
from kstest.gateway import GatewayThread

REPO = Path(__file__).resolve().parents[3]
ARTIFACTS = REPO / "test-artifacts" / "ui"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
T = TypeVar("T")


def ui_plugins(*extra: Plugin[Any]) -> list[Plugin[Any]]:
    """The default plugins (the UI and the forge among them), each ``extra`` plugin replacing the
    default of the same name (a test's own job runner stands in for the real one) or added."""
    return replace_plugins(default_plugins(), *extra)


class UiGateway(GatewayThread):
    """``GatewayThread`` (real uvicorn in a thread) with the default plugins and any ``extra`` plugins."""

    extra_plugins: tuple[Plugin[Any], ...] = ()

    def plugins(self) -> list[Plugin[Any]]:
        return ui_plugins(*self.extra_plugins)

    @contextmanager
    def login(self, token: str | None = None) -> Iterator[httpx.Client]:
        """An httpx client logged in through the form (cookie session); ``.csrf`` holds its CSRF token."""
        with httpx.Client(base_url=self.url, timeout=30) as client:
            yield self._log_in(client, token)

    def _log_in(self, client: httpx.Client, token: str | None) -> httpx.Client:
        reply = client.post("/ui/login", data={"token": token or self.operator_token, "next": "/ui/chat"})
        assert reply.status_code == 303, reply.text
        page = client.get("/ui/chat", headers={"Accept": "text/html"})
        assert page.status_code == 200, page.text
        match = re.search(r'<meta name="csrf-token" content="([^"]+)">', page.text)
        assert match, "no CSRF token on the page"
        client.csrf = match.group(1)  # type: ignore[attr-defined]
        return client


class ScanSearchUiGateway(UiGateway):
    """Without the search plugin: the search page falls back to the chat's scan of recent history."""

    def plugins(self) -> list[Plugin[Any]]:
        return without_plugins(super().plugins(), "search")


@contextmanager
def running_swarm(gw: GatewayThread, agents_yaml: str, **lifecycle: float) -> Iterator[Any]:
    """The real orchestrator (process backend) supervising ``agents_yaml`` on ``gw``'s home, publishing to
    (and taking requests from) ``gw``'s Redis: the only way the UI sees it. ``lifecycle``: overrides of
    its fast defaults (e.g. ``crash_loop_after``)."""
    import yaml

    from orchestrator.spec import parse_spec
    from orchestrator.supervisor.main import Supervisor, stop_swarm

    fast = {"reconcile_s": 0.2, "backoff_base_s": 0.2, "backoff_max_s": 1.0, "stall_after_s": 60}
    # No uid_base: as root, agents' uids come from this home's own block
    # (orchestrator/swarm_dir/uid_ranges.py).
    options = yaml.safe_dump({"lifecycle": fast | lifecycle})
    spec = parse_spec(f"swarm: {gw.swarm}\nagents:\n{agents_yaml}\n{options}")
    supervisor = Supervisor(
        spec, "process", gw.home, gw.url, gw.operator_token, gw.socket_path, redis_url=gw.redis_url
    )
    stop = threading.Event()
    thread = threading.Thread(target=supervisor.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield supervisor
    finally:
        stop.set()
        thread.join(30)
        stop_swarm(supervisor.layout, supervisor.runtime, purge=True)


@contextmanager
def browser_page(gw: UiGateway, token: str | None = None, login: bool = True) -> Iterator[Any]:
    """A headless Debian Chromium page (Playwright), logged in through the form unless ``login=False``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 860})
            page = context.new_page()
            if login:
                page.goto(f"{gw.url}/ui/login")
                page.fill("#token", token or gw.operator_token)
                page.click("button[type=submit]")
                page.wait_for_url(re.compile(r".*/ui/overview.*"))
            yield page
        finally:
            browser.close()


def shot(page: Any, name: str, full_page: bool = False) -> Path:
    """Save a screenshot; ``full_page``: all of the panel (it scrolls inside <main>, not the document)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    size = page.viewport_size
    if full_page and size:
        height = page.evaluate(
            "document.querySelector('header.top').offsetHeight + document.getElementById('main').scrollHeight"
        )
        page.set_viewport_size({"width": size["width"], "height": max(size["height"], int(height))})
    page.screenshot(path=str(path))
    if full_page and size:
        page.set_viewport_size(size)
    return path
