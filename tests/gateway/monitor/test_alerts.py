"""Alerts (``gateway.monitor.alerts``) against local receivers: what is sent, to whom, how often, and that
a failing or hostile receiver, or an agent's words, change nothing else.

The dispatcher runs here with real Redis and real HTTP (receivers on 127.0.0.1); the feeder's own
wiring, a real gateway and ``kswarm validate`` are in ``test_alerts_gateway.py``."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from alerts_kit import Receiver
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from gateway.monitor import keys
from gateway.monitor.alerts import AlertDispatcher, AlertMetrics, AlertTarget, RateWindow
from gateway.monitor.models import AttentionItem, AttentionReport
from gateway.monitor.settings import MonitorSettings
from gateway.redis_facade import StrRedis, str_redis

OWNER = "replica-1"
UI = "https://kswarm.example:8443"
SECRET = "T0001/B0002/s3cr3t-webhook-token"


def item(key: str, severity: str = "critical", title: str = "", reason: str = "why") -> AttentionItem:
    return AttentionItem(
        key=key,
        kind="agent",
        severity=severity,  # type: ignore[arg-type]
        title=title or f"{key} needs a look",
        reason=reason,
        since=time.time(),
        link=f"/ui/agents/{key.partition(':')[2]}",
        subject=key,
    )


def report(*items: AttentionItem, failed: str | None = None) -> AttentionReport:
    sources = {"agents": "ok", "prs": "ok"}
    if failed:
        sources[failed] = "failed: ConnectionError: gone"
    return AttentionReport(items=list(items), computed_at=time.time(), sources=sources)


def target(name: str, url: str, **over: Any) -> AlertTarget:
    return AlertTarget.model_validate({"name": name, "kind": "webhook", "url": url, "retries": 0} | over)


@pytest.fixture
async def redis(clean_redis: str) -> AsyncIterator[StrRedis]:
    client = str_redis(Redis.from_url(clean_redis, decode_responses=True))
    await client.set(keys.LEASE, OWNER)  # this test's dispatcher is the feeding replica
    yield client
    await client.aclose()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rx = Receiver()
    yield rx
    rx.close()


class Alerts:
    """Dispatchers over one Redis; each closed at the end."""

    def __init__(self, redis: StrRedis) -> None:
        self.redis, self.made = redis, []

    def __call__(self, *targets: AlertTarget) -> AlertDispatcher:
        dispatcher = AlertDispatcher(self.redis, targets, UI, "sw", AlertMetrics(CollectorRegistry()))
        self.made.append(dispatcher)
        return dispatcher

    def count(self, dispatcher: AlertDispatcher, name: str, outcome: str) -> float:
        counter = dispatcher.senders[0].metrics.messages
        return counter.labels(name, outcome)._value.get()  # type: ignore[attr-defined, no-any-return]


@pytest.fixture
async def alerts(redis: StrRedis) -> AsyncIterator[Alerts]:
    made = Alerts(redis)
    yield made
    for dispatcher in made.made:
        await dispatcher.aclose()


async def until(check: Any, what: str) -> None:
    deadline = time.monotonic() + 30.0
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_a_new_item_is_posted_once_with_its_link(alerts: Alerts, receiver: Receiver) -> None:
    send = alerts(target("hook", receiver.url()))
    first = item("agent:dev-3")
    assert await send.notify(report(first), OWNER) == [first]
    (body,) = await asyncio.to_thread(receiver.wait, 1)
    assert body["event"] == "attention" and body["severity"] == "critical" and body["swarm"] == "sw"
    assert body["item"]["key"] == "agent:dev-3" and body["link"] == f"{UI}/ui/agents/dev-3"
    # The next pass lists it again (and a new one): only the new one is sent.
    assert await send.notify(report(first, item("agent:dev-4")), OWNER) != []
    bodies = await asyncio.to_thread(receiver.wait, 2)
    assert [b["item"]["key"] for b in bodies] == ["agent:dev-3", "agent:dev-4"]
    # Another replica taking over (a new dispatcher, the same Redis) sends nothing twice.
    assert await alerts(target("hook", receiver.url())).notify(report(first), OWNER) == []


async def test_an_item_that_left_and_came_back_or_got_worse_is_news_again(
    alerts: Alerts, receiver: Receiver
) -> None:
    send = alerts(target("hook", receiver.url(), min_severity="info"))
    await send.notify(report(item("budget:dev", "warning")), OWNER)
    await send.notify(report(item("budget:dev", "critical")), OWNER)  # its budget is now used up
    await send.notify(report(), OWNER)  # cleared
    await send.notify(report(item("budget:dev", "warning")), OWNER)  # and back
    bodies = await asyncio.to_thread(receiver.wait, 3)
    assert [b["severity"] for b in bodies] == ["warning", "critical", "warning"]


async def test_a_failed_source_does_not_make_its_items_news_again(alerts: Alerts, receiver: Receiver) -> None:
    send = alerts(target("hook", receiver.url()))
    await send.notify(report(item("pr:sw/k#1")), OWNER)
    await send.notify(report(failed="prs"), OWNER)  # the forge did not answer this pass: missing, not gone
    assert await send.notify(report(item("pr:sw/k#1")), OWNER) == []


async def test_only_the_lease_holder_sends(alerts: Alerts, receiver: Receiver, redis: StrRedis) -> None:
    send = alerts(target("hook", receiver.url()))
    assert await send.notify(report(item("agent:a")), "another-replica") == []
    assert await redis.hgetall(keys.ALERTED) == {}
    await send.notify(report(item("agent:b")), OWNER)
    bodies = await asyncio.to_thread(receiver.wait, 1)
    assert [b["item"]["key"] for b in bodies] == ["agent:b"]  # a was never sent


async def test_each_target_gets_what_reaches_its_severity(alerts: Alerts) -> None:
    pager, log = Receiver(), Receiver()
    try:
        send = alerts(
            target("pager", pager.url(), min_severity="critical"),
            target("log", log.url(), min_severity="info"),
        )
        await send.notify(report(item("agent:w", "warning"), item("agent:i", "info")), OWNER)
        await send.notify(report(item("agent:c", "critical")), OWNER)
        assert len(await asyncio.to_thread(log.wait, 3)) == 3
        bodies = await asyncio.to_thread(pager.wait, 1)
        assert [b["item"]["key"] for b in bodies] == ["agent:c"]  # the batch before it sent nothing here
    finally:
        pager.close()
        log.close()


async def test_over_the_rate_limit_the_rest_is_one_summary(alerts: Alerts, receiver: Receiver) -> None:
    send = alerts(target("hook", receiver.url(), per_minute=2))
    items = [item(f"agent:dev-{n}", "warning") for n in range(4)] + [item("agent:lead", "critical")]
    await send.notify(report(*items), OWNER)
    first, summary = await asyncio.to_thread(receiver.wait, 2)
    assert first["item"]["key"] == "agent:lead"  # the most severe goes on its own
    assert summary["event"] == "attention-summary" and summary["more"] == 4
    assert summary["text"].startswith("and 4 more") and summary["link"] == f"{UI}/ui/attention"
    assert {i["key"] for i in summary["items"]} == {f"agent:dev-{n}" for n in range(4)}
    await until(lambda: alerts.count(send, "hook", "sent") == 2, "both counted as sent")


def test_the_rate_window_frees_a_message_a_minute_after_it_went() -> None:
    window = RateWindow(2)
    window.record(100.0)
    window.record(101.0)
    assert window.free(130.0) == 0 and window.wait_s(130.0) == pytest.approx(30.0)
    assert window.free(160.5) == 1 and window.wait_s(160.5) == 0
    assert RateWindow.split(3, 3) == (3, 0) and RateWindow.split(5, 2) == (1, 4)
    assert RateWindow.split(5, 1) == (0, 5)  # only a summary fits


async def test_slack_gets_its_text_shape_and_an_agents_words_cannot_ping_or_hide_links(
    alerts: Alerts, receiver: Receiver
) -> None:
    """An agent writes its own crash message (an Attention reason): in Slack it must stay text."""
    send = alerts(target("chat", receiver.url(), kind="slack", per_minute=1))
    hostile = item(
        "agent:dev-1", reason="<!channel> urgent: <http://evil.example/login|re-enter your token> & go"
    )
    await send.notify(report(hostile), OWNER)
    (body,) = await asyncio.to_thread(receiver.wait, 1)
    assert set(body) == {"text"}
    text = body["text"]
    assert "&lt;!channel&gt;" in text and "&lt;http://evil.example/login|re-enter your token&gt;" in text
    assert "<!channel>" not in text and "<http://evil" not in text and "&amp; go" in text
    assert text.endswith(f"<{UI}/ui/agents/dev-1|open in kswarm>")


async def test_a_failing_receiver_is_counted_and_stops_nobody(
    alerts: Alerts, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, httpx's and httpcore's included
    broken, gone = Receiver(status=500), Receiver()
    gone_url = gone.url(f"/services/{SECRET}")
    gone.close()  # nothing listens there any more: connection refused
    try:
        send = alerts(
            target("broken", broken.url(f"/services/{SECRET}"), retries=1),
            target("gone", gone_url, retries=1),
            target("ok", receiver.url()),
        )
        await send.notify(report(item("agent:a")), OWNER)
        await asyncio.to_thread(receiver.wait, 1)
        assert len(await asyncio.to_thread(broken.wait, 2)) == 2  # one retry after a 5xx
        await until(lambda: alerts.count(send, "broken", "failed") == 1, "the broken target's failure")
        await until(lambda: alerts.count(send, "gone", "failed") == 1, "the gone target's failure")
        await send.notify(report(item("agent:a"), item("agent:b")), OWNER)  # the senders go on
        assert [b["item"]["key"] for b in await asyncio.to_thread(receiver.wait, 2)] == ["agent:a", "agent:b"]
        await asyncio.to_thread(broken.wait, 4)
    finally:
        broken.close()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "alert to broken (http://127.0.0.1:" in logged and "HTTP 500" in logged
    assert "alert to gone" in logged and "ConnectError" in logged
    assert SECRET not in logged and "/services/" not in logged


async def test_a_receiver_cannot_redirect_an_alert_elsewhere(alerts: Alerts, receiver: Receiver) -> None:
    """No redirect is followed: a receiver (or whoever took its name over) cannot make the gateway post
    the item to another address, e.g. a service on the gateway's own host."""
    bouncer = Receiver(status=307, location=receiver.url("/internal"))
    try:
        send = alerts(target("bouncer", bouncer.url(), retries=2))
        await send.notify(report(item("agent:a")), OWNER)
        await until(lambda: alerts.count(send, "bouncer", "failed") == 1, "the redirect counted as a failure")
        assert len(bouncer.bodies()) == 1  # refused, not retried
        assert receiver.bodies() == []
    finally:
        bouncer.close()


def test_the_url_is_never_shown_and_must_be_http() -> None:
    url = f"https://hooks.slack.example/services/{SECRET}"
    settings = MonitorSettings(alerts=[{"name": "chat", "kind": "slack", "url": url}])  # type: ignore[list-item]
    shown = [repr(settings), str(settings), settings.model_dump_json(), str(settings.model_dump())]
    assert all(SECRET not in s for s in shown)
    assert settings.alerts[0].shown_url() == "https://hooks.slack.example/…"
    assert settings.alerts[0].url.get_secret_value() == url
    for bad in (f"ftp://hooks.example/{SECRET}", f"file:///{SECRET}", f"http:///{SECRET}"):
        with pytest.raises(ValueError) as caught:
            MonitorSettings(alerts=[{"name": "x", "kind": "webhook", "url": bad}])  # type: ignore[list-item]
        assert SECRET not in str(caught.value), "the error must not quote the URL"
    with pytest.raises(ValueError, match="defined twice"):
        MonitorSettings(alerts=[{"name": "x", "kind": "webhook", "url": "http://h/"}] * 2)  # type: ignore[list-item]
