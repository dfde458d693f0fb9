"""Alerts: Attention items pushed to the operator's own receivers (a generic webhook, a Slack channel).

Attention is computed on the gateway (``gateway.monitor.attention``); an operator who is not looking at
the UI learns about an item here. The targets are operator configuration only (``MonitorSettings.alerts``,
which the swarm spec embeds as its ``alerts:`` section): nothing an agent sends picks a receiver, so the
gateway posts only to URLs the operator wrote down (no server-side request an agent could steer), and
redirects are never followed (a receiver cannot bounce an alert, with its content, somewhere else).

A target's URL often *is* its secret (a Slack incoming webhook's path): it is a ``SecretStr``, so it
shows as ``**********`` in every dump, repr and API answer, and logs name the target and its host only
(``shown_url``). Requests go straight to an httpx transport, whose client-level request log would
otherwise write the whole URL.

When an item is first seen (its key was not on the list at the last pass) or its severity rose, each
target whose ``min_severity`` it reaches gets it once. The feeder that calls ``AlertDispatcher.notify``
holds the monitor's lease, so one gateway replica sends; which keys were sent is kept in Redis
(``ks:mon:alerted``), so a restart or a take-over sends nothing twice (at most once: an alert lost in a
crash between the two is not resent). Each target sends from its own task: a slow or failing receiver
delays nobody, and the feeder only appends to a list. At most ``per_minute`` messages per target per
minute: when more items wait than that allows, the most severe go one by one and the last message says
``and K more`` with a link to the Attention page.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import httpx
from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, Field

from gateway.cancellation import rounds
from gateway.monitor import keys
from gateway.monitor.alert_targets import SEVERITY_RANK, AlertTarget
from gateway.monitor.models import AttentionItem, AttentionReport, Severity
from gateway.redis_facade import StrRedis

log = logging.getLogger("kswarm.monitor.alerts")

WINDOW_S = 60.0  # the rate limit's window: per_minute messages per target
MAX_PENDING = 500  # items one target holds while it waits for its window; the rest are only counted
RETRY_BASE_S = 0.5  # backoff before retry k: RETRY_BASE_S * 2**(k-1)
SUMMARY_LISTED = 20  # items named in a summary's JSON


# -- what is sent ----------------------------------------------------------------------------------


def slack_escape(text: str) -> str:
    """Slack's control characters as entities: an agent's words (an error, a PR title) cannot mention
    ``<!channel>`` or hide a link ``<http://...|...>`` in the operator's channel."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class AlertMessage(BaseModel):
    """One message to a target: an item, or a summary of ``more`` items (``items`` lists them)."""

    severity: Severity
    text: str = Field(description="One line for people: severity, title, reason.")
    link: str = Field(description="Absolute URL of the page to open.")
    item: AttentionItem | None = None
    more: int = 0
    items: list[AttentionItem] = Field(default_factory=list)

    @classmethod
    def one(cls, item: AttentionItem, ui_base: str) -> AlertMessage:
        return cls(
            severity=item.severity,
            text=f"[{item.severity}] {item.title}: {item.reason}",
            link=ui_base + (item.link or "/ui/attention"),
            item=item,
        )

    @classmethod
    def summary(cls, items: list[AttentionItem], more: int, ui_base: str) -> AlertMessage:
        worst = max((i.severity for i in items), key=SEVERITY_RANK.__getitem__, default="info")
        counts = {s: sum(i.severity == s for i in items) for s in ("critical", "warning", "info")}
        split = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        return cls(
            severity=worst,
            text=f"and {more} more item(s) need attention" + (f" ({split})" if split else ""),
            link=f"{ui_base}/ui/attention",
            more=more,
            items=items[:SUMMARY_LISTED],
        )

    def body(self, kind: str, swarm: str) -> dict[str, Any]:
        if kind == "slack":
            head = f"*[{self.severity}]* " if self.item is not None else ""
            title = slack_escape(self.text.removeprefix(f"[{self.severity}] "))
            return {"text": f"{head}{title} (swarm {slack_escape(swarm)}) <{self.link}|open in kswarm>"}
        body: dict[str, Any] = {
            "source": "kswarm",
            "swarm": swarm,
            "event": "attention" if self.item is not None else "attention-summary",
            "severity": self.severity,
            "text": self.text,
            "link": self.link,
        }
        if self.item is not None:
            body["item"] = self.item.model_dump(mode="json")
        else:
            body["more"] = self.more
            body["items"] = [{"key": i.key, "severity": i.severity, "title": i.title} for i in self.items]
        return body


# -- how it is sent ------------------------------------------------------------------------------


class RateWindow:
    """At most ``limit`` messages in any ``WINDOW_S`` (a sliding window of send times)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.sent: deque[float] = deque()

    def free(self, now: float) -> int:
        while self.sent and self.sent[0] <= now - WINDOW_S:
            self.sent.popleft()
        return self.limit - len(self.sent)

    def wait_s(self, now: float) -> float:
        """Seconds until one more message may go (0: now)."""
        return 0.0 if self.free(now) > 0 else self.sent[0] + WINDOW_S - now

    def record(self, now: float) -> None:
        self.sent.append(now)

    @staticmethod
    def split(waiting: int, free: int) -> tuple[int, int]:
        """(sent one by one, summarized) for ``waiting`` items when ``free`` messages may go (free >= 1)."""
        if waiting <= free:
            return waiting, 0
        return free - 1, waiting - (free - 1)


class AlertMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.messages = Counter(
            "kswarm_alerts",
            "Alert messages per target: sent, failed (after its retries), dropped (over the backlog)",
            ["target", "outcome"],
            registry=registry,
        )


class TargetSender:
    """One target's queue and the task that drains it within the target's rate limit."""

    def __init__(
        self,
        target: AlertTarget,
        ui_base: str,
        swarm: str,
        metrics: AlertMetrics,
        transport: httpx.AsyncBaseTransport,
    ) -> None:
        self.target, self.ui_base, self.swarm = target, ui_base, swarm
        self.metrics, self.transport = metrics, transport
        self.pending: list[AttentionItem] = []
        self.window = RateWindow(target.per_minute)
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def offer(self, items: Sequence[AttentionItem]) -> None:
        """Queue what this target wants of ``items``; returns at once."""
        wanted = [i for i in items if self.target.wants(i)]
        if not wanted:
            return
        room = MAX_PENDING - len(self.pending)
        if len(wanted) > room:
            self.metrics.messages.labels(self.target.name, "dropped").inc(len(wanted) - max(room, 0))
        self.pending += wanted[: max(room, 0)]
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(
                self.run(), name=f"kswarm-alerts-{self.target.name}"
            )
        self.wake.set()

    async def run(self) -> None:
        for _ in rounds():
            await self.wake.wait()
            self.wake.clear()
            while self.pending:
                delay = self.window.wait_s(time.monotonic())
                if delay > 0:
                    await asyncio.sleep(delay)  # the window frees; items that arrive meanwhile join
                    continue
                batch, self.pending = self.pending, []
                batch.sort(key=lambda i: (-SEVERITY_RANK[i.severity], i.since))
                one_by_one, summarized = RateWindow.split(len(batch), self.window.free(time.monotonic()))
                messages = [AlertMessage.one(i, self.ui_base) for i in batch[:one_by_one]]
                if summarized:
                    messages.append(AlertMessage.summary(batch[one_by_one:], summarized, self.ui_base))
                for message in messages:
                    self.window.record(time.monotonic())
                    await self.send(message)

    async def send(self, message: AlertMessage) -> bool:
        """POST ``message``; bounded retries; a failure is logged and counted, never raised."""
        attempts, why = 0, ""
        for attempt in range(self.target.retries + 1):
            if attempt:
                await asyncio.sleep(RETRY_BASE_S * 2 ** (attempt - 1))
            attempts += 1
            try:
                async with asyncio.timeout(self.target.timeout_s):
                    status = await self.post(message.body(self.target.kind, self.swarm))
            except Exception as exc:  # any failure of one POST (httpx's, a timeout) is this target's
                why = type(exc).__name__  # the text may quote the URL: the type says enough
                continue
            if 200 <= status < 300:
                self.metrics.messages.labels(self.target.name, "sent").inc()
                return True
            why = f"HTTP {status}"
            if status < 500 and status != 429:
                break  # refused (or a redirect, which is not followed): another try would be refused too
        log.warning(
            "alert to %s (%s) failed after %d attempt(s): %s",
            self.target.name,
            self.target.shown_url(),
            attempts,
            why,
        )
        self.metrics.messages.labels(self.target.name, "failed").inc()
        return False

    async def post(self, body: dict[str, Any]) -> int:
        request = httpx.Request(
            "POST",
            self.target.url.get_secret_value(),
            json=body,
            headers={"User-Agent": "kswarm-alerts"},
            extensions={"timeout": httpx.Timeout(self.target.timeout_s).as_dict()},
        )
        response = await self.transport.handle_async_request(request)
        await response.aclose()  # the answer's body is not read: only its status counts
        return response.status_code

    async def aclose(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None


class AlertDispatcher:
    """Which Attention items are new (``ks:mon:alerted``), handed to each target's sender."""

    def __init__(
        self,
        redis: StrRedis,
        targets: Sequence[AlertTarget],
        ui_base: str,
        swarm: str,
        metrics: AlertMetrics,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.redis = redis
        # Retries are the sender's (counted, with backoff); the transport makes one attempt each.
        self.transport = transport or httpx.AsyncHTTPTransport(retries=0)
        base = ui_base.rstrip("/")
        self.senders = [TargetSender(t, base, swarm, metrics, self.transport) for t in targets]

    async def notify(self, report: AttentionReport, owner: str) -> list[AttentionItem]:
        """Send what is new in ``report`` (the feeder's, under its lease ``owner``); returns it."""
        if not self.senders:
            return []
        alerted = await self.redis.hgetall(keys.ALERTED)
        now = {i.key: i for i in report.items}
        fresh = [
            i
            for i in report.items
            if i.key not in alerted or SEVERITY_RANK[i.severity] > SEVERITY_RANK.get(alerted[i.key], 2)
        ]
        changed = {k: i.severity for k, i in now.items() if alerted.get(k) != i.severity}
        # An item that left the list is forgotten (when it comes back it is news again), unless a source
        # failed in this pass: its items are missing, not gone, and must not be sent again next pass.
        complete = not any(state.startswith("failed") for state in report.sources.values())
        gone = [k for k in alerted if k not in now] if complete else []
        if changed or gone:
            async with self.redis.pipeline(transaction=True) as pipe:
                if changed:
                    pipe.hset(keys.ALERTED, mapping=changed)
                if gone:
                    pipe.hdel(keys.ALERTED, *gone)
                if await self.redis.get(keys.LEASE) != owner:
                    return []  # another replica feeds (and sends) now
                await pipe.execute()
        for sender in self.senders:
            sender.offer(fresh)
        return fresh

    async def aclose(self) -> None:
        for sender in self.senders:
            await sender.aclose()
        await self.transport.aclose()
