"""Who may open /ui (plain HTTP): operators by cookie session or bearer; agents never; CSRF on changes."""

from __future__ import annotations

import httpx
import redis as redis_sync
from ui_kit import UiGateway

HTML = {"Accept": "text/html"}


def test_agent_token_is_refused_everywhere_in_the_ui(ui_gateway: UiGateway) -> None:
    agent = ui_gateway.add_principal("dev-1")
    with ui_gateway.client(agent) as client:
        for path in ("/ui/chat", "/ui/agents", "/ui/events", "/ui/api/channels", "/ui/prs"):
            reply = client.get(path)
            assert reply.status_code == 403, (path, reply.text)
            assert "may not open the operator UI" in reply.json()["detail"]
        assert client.get("/ui/chat", headers=HTML).status_code == 403  # a page, not a redirect
        assert client.post("/ui/agents/dev-1/restart").status_code == 403
    # Nor can an agent get a cookie session through the login form.
    with httpx.Client(base_url=ui_gateway.url) as browser:
        reply = browser.post("/ui/login", data={"token": agent})
        assert reply.status_code == 403 and "may not open the operator UI" in reply.text
        assert "ks_ui_session" not in browser.cookies


def test_no_credentials_send_browsers_to_the_login_page_and_scripts_get_401(ui_gateway: UiGateway) -> None:
    with httpx.Client(base_url=ui_gateway.url) as client:
        reply = client.get("/ui/chat?c=ops&at=1-0", headers=HTML)
        assert reply.status_code == 303
        assert reply.headers["location"] == "/ui/login?next=/ui/chat%3Fc%3Dops%26at%3D1-0"
        form = client.get(reply.headers["location"]).text
        assert 'name="next" value="/ui/chat?c=ops&amp;at=1-0"' in form
        assert client.get("/ui", headers=HTML).headers["location"] == "/ui/overview"  # the landing page
        login = client.get("/ui/login", headers=HTML)
        assert login.status_code == 200 and 'name="token"' in login.text
        for path in ("/ui/agents", "/ui/events", "/ui/api/channels"):
            reply = client.get(path)
            assert reply.status_code == 401 and reply.headers["www-authenticate"].startswith("Bearer")
        assert client.post("/ui/api/channels/general/messages", json={"text": "x"}).status_code == 401


def test_bad_tokens_get_401(ui_gateway: UiGateway) -> None:
    with ui_gateway.client("ksw_not-a-real-token") as client:
        reply = client.get("/ui/chat", headers=HTML)
        assert reply.status_code == 401 and "invalid or revoked token" in reply.text
    with httpx.Client(base_url=ui_gateway.url) as browser:
        reply = browser.post("/ui/login", data={"token": "ksw_wrong"})
        assert reply.status_code == 401 and "invalid or revoked token" in reply.text
        assert browser.post("/ui/login", data={}).status_code == 401
    with httpx.Client(base_url=ui_gateway.url, cookies={"ks_ui_session": "forged"}) as forger:
        forged = forger.get("/ui/chat", headers=HTML)
        assert forged.status_code == 303 and forged.headers["location"].startswith("/ui/login")


def test_operator_bearer_works_for_scripts_without_csrf(ui_gateway: UiGateway) -> None:
    with ui_gateway.client(ui_gateway.operator_token) as op:
        assert op.get("/ui/agents").status_code == 200
        reply = op.post("/ui/api/channels/general/messages", json={"text": "from a script"})
        assert reply.status_code == 201 and reply.json()["sender"] == "operator"
        # The bridge reaches /api only: not the event stream, not other mounts by dot segments.
        for path in ("/ui/api/events", "/ui/api/../mcp", "/ui/api/channels/..%2F..%2Fmcp", "/ui/api//x"):
            assert op.get(path).status_code == 404, path


def test_login_sets_a_strict_httponly_session_stored_in_redis(ui_gateway: UiGateway) -> None:
    with httpx.Client(base_url=ui_gateway.url) as browser:
        reply = browser.post("/ui/login", data={"token": ui_gateway.operator_token, "next": "/ui/agents"})
        assert reply.status_code == 303 and reply.headers["location"] == "/ui/agents"
        cookie = reply.headers["set-cookie"].lower()
        for flag in ("httponly", "samesite=strict", "path=/ui", "max-age="):
            assert flag in cookie, cookie
        session_id = browser.cookies["ks_ui_session"]
        assert browser.get("/ui/agents", headers=HTML).status_code == 200
    r = redis_sync.Redis.from_url(ui_gateway.redis_url, decode_responses=True)
    try:
        keys = r.keys("ks:ui-session:*")
        assert len(keys) == 1 and session_id not in keys[0], "stored under a hash of the id, not the id"
        assert 0 < r.ttl(keys[0]) <= 12 * 3600
        assert r.hget(keys[0], "name") == "operator"
    finally:
        r.close()


def test_login_never_redirects_out_of_the_ui(ui_gateway: UiGateway) -> None:
    with httpx.Client(base_url=ui_gateway.url) as browser:
        for evil in ("https://evil.example/", "//evil.example/ui", "/api/principals"):
            reply = browser.post("/ui/login", data={"token": ui_gateway.operator_token, "next": evil})
            assert reply.headers["location"] == "/ui/overview", evil


def test_changes_need_the_session_csrf_token(ui_gateway: UiGateway) -> None:
    with ui_gateway.login() as browser:
        url = "/ui/api/channels/general/messages"
        missing = browser.post(url, json={"text": "no csrf"})
        assert missing.status_code == 403 and "CSRF" in missing.json()["detail"]
        wrong = browser.post(url, json={"text": "x"}, headers={"X-CSRF-Token": "guess"})
        assert wrong.status_code == 403
        assert browser.post("/ui/agents/x/restart").status_code == 403
        assert browser.post("/ui/logout").status_code == 403
        cross = browser.post(
            url,
            json={"text": "x"},
            headers={"X-CSRF-Token": browser.csrf, "Origin": "http://evil.example"},
        )
        assert cross.status_code == 403
        ok = browser.post(
            url, json={"text": "with csrf", "sender": "dev-9"}, headers={"X-CSRF-Token": browser.csrf}
        )
        assert ok.status_code == 201, ok.text
        assert ok.json()["sender"] == "operator", "the sender comes from the session, never the body"
        # Reading needs no CSRF token.
        assert browser.get("/ui/api/channels/general/messages").json()["messages"][-1]["text"] == "with csrf"


def test_a_get_through_the_bridge_cannot_drain_the_operators_inbox(ui_gateway: UiGateway) -> None:
    """Another page on this host (an <img> on another port: same-site) GETs /ui/api/inbox with the
    operator's cookie: refused; and a GET of our own pages only peeks. The cursor moves only by an
    explicit, CSRF-checked POST /ui/api/inbox/ack (before, any GET advanced it)."""
    agent = ui_gateway.add_principal("dev-1")
    with ui_gateway.client(agent) as dev:
        sent = dev.post("/api/dms/operator/messages", json={"text": "please look at #3"})
        assert sent.status_code == 201, sent.text
    with ui_gateway.login() as browser:
        img = {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"}
        assert browser.get("/ui/api/inbox", headers=img).status_code == 403
        ours = {"Sec-Fetch-Site": "same-origin"}
        for _ in range(2):  # read twice: nothing was consumed
            items = browser.get("/ui/api/inbox", params={"peek": "false"}, headers=ours).json()["items"]
            assert [i["text"] for i in items] == ["please look at #3"]
        assert browser.post("/ui/api/inbox/ack", json={"through": items[0]["id"]}).status_code == 403
        acked = browser.post(
            "/ui/api/inbox/ack", json={"through": items[0]["id"]}, headers={"X-CSRF-Token": browser.csrf}
        )
        assert acked.status_code == 200 and acked.json()["cursor"] == items[0]["id"], acked.text
        assert browser.get("/ui/api/inbox", headers=ours).json()["items"] == []


def test_an_inbox_ack_moves_the_cursor_forward_only_and_never_past_the_newest(ui_gateway: UiGateway) -> None:
    bob = ui_gateway.add_principal("bob")
    alice = ui_gateway.add_principal("alice")
    with ui_gateway.client(alice) as a, ui_gateway.client(bob) as b:
        ids = [a.post("/api/dms/bob/messages", json={"text": f"m{i}"}).json()["id"] for i in range(3)]
        assert b.post("/api/inbox/ack", json={"through": "99999999999999-0"}).json()["cursor"] == ids[-1]
        assert b.post("/api/inbox/ack", json={"through": ids[0]}).json()["cursor"] == ids[-1]  # never back
        assert b.get("/api/inbox").json()["items"] == []
        assert b.post("/api/inbox/ack", json={"through": "garbage"}).status_code == 400


def test_logout_and_token_revocation_end_the_session(ui_gateway: UiGateway) -> None:
    with ui_gateway.login() as browser:
        out = browser.post("/ui/logout", data={"csrf": browser.csrf})
        assert out.status_code == 303 and out.headers["location"] == "/ui/login"
        assert browser.get("/ui/agents").status_code == 401
    second = ui_gateway.add_principal("night-shift", "operator")
    with ui_gateway.login(second) as browser:
        assert browser.get("/ui/agents").status_code == 200
        with ui_gateway.client(ui_gateway.operator_token) as op:
            assert op.delete("/api/principals/night-shift/tokens").json()["revoked"] == 1
        assert browser.get("/ui/agents").status_code == 401, "a revoked token ends its sessions"
