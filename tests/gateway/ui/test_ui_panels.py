"""The panels over plain HTTP: what they show with and without the other components' backends."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from ui_kit import UiGateway, running_swarm

from kstest.sse import read_events
from kstest.waiting import wait_for

HTML = {"Accept": "text/html"}


def test_missing_backends_say_not_available_yet(ui_gateway: UiGateway) -> None:
    with ui_gateway.login() as browser:
        page = browser.get("/ui/dataset")
        assert page.status_code == 200
        # The dataset endpoint exists, but nothing was built yet: the panel says so and how.
        assert "no dataset built yet" in page.text and "kswarm dataset build" in page.text
        # The job runner is registered by default: its panel shows the real pools.
        jobs = browser.get("/ui/jobs").text
        assert "Not available yet" not in jobs and "cpu" in jobs
        agents = browser.get("/ui/agents").text
        assert "orchestrator: not available here" in agents


def test_agents_panel_without_an_orchestrator_disables_actions_with_a_reason(ui_gateway: UiGateway) -> None:
    token = ui_gateway.add_principal("dev-1")
    with ui_gateway.client(token) as agent:
        agent.post("/api/heartbeat", json={"state": "working", "doing": "tiling the matmul"})
    with ui_gateway.login() as browser:
        page = browser.get("/ui/agents").text
        assert "dev-1" in page and "tiling the matmul" in page and "working" in page
        assert 'data-action="restart" data-agent="dev-1" disabled' in page
        assert "no swarm has reported to this gateway" in page  # the tooltip says why
        for action in ("restart", "quarantine", "snapshot"):
            refused = browser.post(f"/ui/agents/dev-1/{action}", headers={"X-CSRF-Token": browser.csrf})
            assert refused.status_code == 409, action
            assert "no swarm has reported to this gateway" in refused.json()["message"]
        assert "no swarm has reported" in browser.get("/ui/agents/dev-1/memory").text
    with ui_gateway.client(token) as agent:  # nothing was revoked on the way
        assert agent.get("/api/me").status_code == 200


def test_pages_escape_agent_text_and_forbid_inline_scripts(ui_gateway: UiGateway) -> None:
    token = ui_gateway.add_principal("mallory")
    evil = "<script>alert(1)</script><img src=x onerror=alert(2)> @operator"
    with ui_gateway.client(token) as agent:
        assert agent.post("/api/channels/general/messages", json={"text": evil}).status_code == 201
    with ui_gateway.login() as browser:
        page = browser.get("/ui/chat?c=general")
        assert "<script>alert(1)" not in page.text and "&lt;script&gt;alert(1)" in page.text
        assert "<img src=x" not in page.text
        assert '<span class="mention mention-me">@operator</span>' in page.text
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp


async def test_ui_events_stream_rendered_messages_to_the_cookie_session(ui_gateway: UiGateway) -> None:
    token = ui_gateway.add_principal("dev-1")
    with ui_gateway.login() as sync_browser:
        cookies = dict(sync_browser.cookies)
    async with (
        httpx.AsyncClient(base_url=ui_gateway.url, cookies=cookies, timeout=30) as browser,
        ui_gateway.async_client(token) as agent,
    ):

        async def first_event() -> Any:
            async with browser.stream("GET", "/ui/events") as response:
                assert response.status_code == 200
                async for event in read_events(response):
                    return event
            return None

        task = asyncio.create_task(first_event())
        await asyncio.sleep(0.5)
        await agent.post("/api/channels/general/messages", json={"text": "live <b>now</b> @dev-1"})
        event = await asyncio.wait_for(task, 10)
    assert event.data["type"] == "message" and event.data["sender"] == "dev-1"
    assert "live &lt;b&gt;now&lt;/b&gt;" in event.data["html"]
    assert f'data-event="{event.id}"' in event.data["html"]


def test_operator_sees_dms_read_only_unless_a_member(ui_gateway: UiGateway) -> None:
    a = ui_gateway.add_principal("alice")
    ui_gateway.add_principal("bob")
    with ui_gateway.client(a) as alice:
        assert alice.post("/api/dms/bob/messages", json={"text": "psst"}).status_code == 201
    with ui_gateway.login() as browser:
        page = browser.get("/ui/chat?c=dm:alice:bob").text
        assert "psst" in page and "read-only" in page and 'id="composer"' not in page
        mine = browser.get("/ui/chat?dm=alice").text
        assert 'data-post="/ui/api/dms/alice/messages"' in mine
        sent = browser.post(
            "/ui/api/dms/alice/messages", json={"text": "hi alice"}, headers={"X-CSRF-Token": browser.csrf}
        )
        assert sent.status_code == 201 and sent.json()["channel"] == "dm:alice:operator"


def test_history_paging_threads_and_search(ui_gateway: UiGateway) -> None:
    agent = ui_gateway.add_principal("dev-1")
    url = "/api/channels/ops/messages"
    with ui_gateway.client(ui_gateway.operator_token) as op, ui_gateway.client(agent) as dev:
        # Two senders: each stays inside the chat rate limit's burst.
        ids = [(op, dev)[i % 2].post(url, json={"text": f"line {i}"}).json()["id"] for i in range(60)]
        op.post(url, json={"text": "a reply", "reply_to": ids[-1]})
    with ui_gateway.login() as browser:
        page = browser.get("/ui/chat?c=ops").text
        assert "line 59" in page and "line 10" not in page and 'data-more="1"' in page
        assert '<span class="count">1</span> reply' in page
        older = browser.get("/ui/chat/history", params={"c": "ops", "before": ids[11]})
        assert "line 10" in older.text and "line 0" in older.text and older.headers["x-more"] == "0"
        thread = browser.get("/ui/chat/thread", params={"c": "ops", "root": ids[-1]}).text
        assert "line 59" in thread and "a reply" in thread and f'data-reply-to="{ids[-1]}"' in thread

        # The full-text index (the search plugin): words, case-folded; a prefix with *; matches marked.
        def hits(q: str) -> list[str]:
            page = browser.get("/ui/chat/search", params={"q": q}).text
            return [re.sub(r"<[^>]+>", "", h) for h in re.findall(r'<div class="snippet">(.*?)</div>', page)]

        assert wait_for(lambda: hits("LINE 4"), what="the index to hold the lines") == ["line 4"]
        found = hits("LINE 4*")
        assert sorted(found) == sorted(["line 4", *(f"line {i}" for i in range(40, 50))]), found
        marked = browser.get("/ui/chat/search", params={"q": "line 4"}).text
        assert "<mark>line</mark> <mark>4</mark>" in marked
        around = browser.get("/ui/chat", params={"c": "ops", "at": ids[5]}).text
        assert "line 5" in around and "Jump to latest" in around


@pytest.mark.parametrize("path", ["/ui/chat/history?c=ops&before=nope", "/ui/chat?c=ops&at=1-x"])
def test_bad_ids_are_400(ui_gateway: UiGateway, path: str) -> None:
    with ui_gateway.login() as browser:
        assert browser.get(path).status_code == 400


def test_ui_metrics_count_logins(ui_gateway: UiGateway) -> None:
    with ui_gateway.login():
        pass
    with ui_gateway.client(ui_gateway.operator_token) as op:
        text = op.get("/metrics").text
    assert 'kswarm_ui_logins_total{outcome="ok"} 1.0' in text


def test_agents_panel_shows_tokens_and_cost_when_the_llm_proxy_is_registered(
    clean_redis: str, short_tmp: Path
) -> None:
    from gateway.llm.books import Usage
    from gateway.llm.plugin import LLMProxyPlugin
    from gateway.services import LLM_USAGE

    gw = UiGateway(short_tmp / "home", clean_redis)
    gw.extra_plugins = (LLMProxyPlugin(),)
    gw.start()
    try:
        gw.add_principal("dev-1")
        store = gw.app.state.ctx.services.get(LLM_USAGE)
        usage = Usage(input_tokens=12_000, output_tokens=3_456)
        assert gw._loop is not None
        asyncio.run_coroutine_threadsafe(store.record("dev-1", None, usage), gw._loop).result(10)
        with gw.login() as browser:
            page = browser.get("/ui/agents").text
    finally:
        gw.stop()
    assert "not available yet (no LLM proxy" not in page
    assert "15,456" in page and "$" in page


def test_all_activity_interleaves_every_channel_and_dm(ui_gateway: UiGateway) -> None:
    a = ui_gateway.add_principal("alice")
    ui_gateway.add_principal("bob")
    with ui_gateway.client(a) as alice:
        alice.post("/api/channels/general/messages", json={"text": "one in general"})
        alice.post("/api/channels/ops/messages", json={"text": "two in ops"})
        alice.post("/api/dms/bob/messages", json={"text": "three in a DM"})
    with ui_gateway.login() as browser:
        page = browser.get("/ui/chat").text  # the default view
    assert page.index("one in general") < page.index("two in ops") < page.index("three in a DM")
    assert 'class="messages feed"' in page and "dm:alice:bob" in page
    assert 'data-event="' in page and "pick a channel or DM to write in" in page


@pytest.mark.slow
def test_agents_panel_shows_the_published_swarm_its_memory_and_metrics(ui_gateway: UiGateway) -> None:
    with running_swarm(ui_gateway, "  - pattern: dev-{i}\n    count: 2\n") as supervisor:

        def published() -> str | None:
            with ui_gateway.login() as browser:
                page = browser.get("/ui/agents", headers=HTML).text
            up = re.findall(r'data-liveness="(running|idle)"', page)
            return page if len(up) == 2 else None

        page = wait_for(published, 60, "both agents published as running")
        assert f"swarm {ui_gateway.swarm} · process · orchestrator running" in page
        assert 'data-action="restart" data-agent="dev-1">' in page  # enabled
        with ui_gateway.login() as browser:
            memory = browser.get("/ui/agents/dev-1/memory").text
            assert "# Memory of dev-1" in memory and "MEMORY.md" in memory
            csrf = {"X-CSRF-Token": browser.csrf}
            bad = browser.post("/ui/agents/dev-1/rollback", content=b'{"snapshot": 7}', headers=csrf)
            assert bad.status_code == 400 and "snapshot" in bad.json()["message"]
            assert browser.post("/ui/agents/dev-1/format-disk", headers=csrf).status_code == 422
        with ui_gateway.client(ui_gateway.operator_token) as op:
            metrics = op.get("/metrics").text
        assert 'kswarm_agent_restarts{agent="dev-1"} 0.0' in metrics
        assert supervisor.runtime.status("dev-2").running
