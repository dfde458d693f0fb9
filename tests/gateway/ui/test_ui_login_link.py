"""One-time login links (``POST /api/ui/login-links``, ``GET /ui/login/link/<code>``): one use, short
lived, operators' bearer tokens only, no token in the URL; and, in Chromium, the link opens the UI."""

from __future__ import annotations

from pathlib import Path

import httpx
import redis as redis_sync
from ui_kit import UiGateway, browser_page

from kstest.waiting import wait_for

HTML = {"Accept": "text/html"}
LINK_KEYS = "ks:ui-login-link:*"


def make_link(gw: UiGateway, token: str | None = None) -> dict:
    with gw.client(token or gw.operator_token) as client:
        reply = client.post("/api/ui/login-links")
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_a_link_logs_a_browser_in_once_and_holds_no_token(ui_gateway: UiGateway) -> None:
    link = make_link(ui_gateway)
    assert link["url"].endswith(link["path"]) and link["path"].startswith("/ui/login/link/")
    assert link["expires_s"] == 600
    assert ui_gateway.operator_token not in link["url"]
    with httpx.Client(base_url=ui_gateway.url) as browser:
        reply = browser.get(link["path"], headers=HTML)
        assert reply.status_code == 303 and reply.headers["location"] == "/ui/overview"
        cookie = reply.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
        assert browser.get("/ui/agents", headers=HTML).status_code == 200  # logged in
    with httpx.Client(base_url=ui_gateway.url) as second:  # the same link again: refused
        again = second.get(link["path"], headers=HTML)
        assert again.status_code == 401 and "used, expired or unknown" in again.text
        assert "ks_ui_session" not in second.cookies
    # Redis holds only the code's hash, never the code (nor the token).
    r = redis_sync.Redis.from_url(ui_gateway.redis_url, decode_responses=True)
    code = link["path"].rsplit("/", 1)[1]
    for key in r.scan_iter("ks:*"):
        assert code not in key


def test_an_expired_or_unknown_link_is_refused_with_the_login_form(ui_gateway: UiGateway) -> None:
    link = make_link(ui_gateway)
    r = redis_sync.Redis.from_url(ui_gateway.redis_url, decode_responses=True)
    (key,) = list(r.scan_iter(LINK_KEYS))
    assert 0 < r.ttl(key) <= 600
    r.pexpire(key, 1)  # let it expire now, as it would after 10 minutes
    wait_for(lambda: not r.exists(key), what="the link to expire")
    with httpx.Client(base_url=ui_gateway.url) as browser:
        for path in (link["path"], "/ui/login/link/made-up", "/ui/login/link/" + "x" * 5000):
            reply = browser.get(path, headers=HTML)
            assert reply.status_code == 401 and 'name="token"' in reply.text, path
        assert "ks_ui_session" not in browser.cookies


def test_only_an_operator_bearer_can_make_links(ui_gateway: UiGateway) -> None:
    agent = ui_gateway.add_principal("dev-1")
    with ui_gateway.client(agent) as client:
        reply = client.post("/api/ui/login-links")
        assert reply.status_code == 403 and "may not open the operator UI" in reply.json()["detail"]
    with httpx.Client(base_url=ui_gateway.url) as anonymous:
        assert anonymous.post("/api/ui/login-links").status_code == 401
    # A cookie session cannot mint links, directly or through the /ui/api bridge (which re-sends no token).
    with ui_gateway.login() as browser:
        headers = {"X-CSRF-Token": browser.csrf}  # type: ignore[attr-defined]
        session = {"ks_ui_session": browser.cookies["ks_ui_session"]}
        with httpx.Client(base_url=ui_gateway.url, cookies=session) as rider:  # sent on /api too
            for path in ("/api/ui/login-links", "/ui/api/ui/login-links"):
                reply = rider.post(path, headers=headers)
                assert reply.status_code in (401, 403), (path, reply.text)
    assert not list(redis_sync.Redis.from_url(ui_gateway.redis_url).scan_iter(LINK_KEYS))


def test_a_link_made_with_a_revoked_token_logs_nobody_in(ui_gateway: UiGateway) -> None:
    second = ui_gateway.add_principal("ops-2", kind="operator")
    link = make_link(ui_gateway, second)
    with ui_gateway.client(ui_gateway.operator_token) as admin:
        assert admin.delete("/api/principals/ops-2/tokens").status_code == 200
    with httpx.Client(base_url=ui_gateway.url) as browser:
        assert browser.get(link["path"], headers=HTML).status_code == 401


def test_the_link_opens_the_landing_page_in_chromium(ui_gateway: UiGateway, chromium: Path) -> None:
    link = make_link(ui_gateway)
    with browser_page(ui_gateway, login=False) as page:
        page.goto(link["url"])
        page.wait_for_url("**/ui/overview")
        assert page.locator("nav").count() > 0
        page.goto(link["url"])  # used: the login form says so
        assert "used, expired or unknown" in page.locator("#login-error").inner_text()
