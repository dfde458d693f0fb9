"""Prometheus metrics, in a registry per app (no process-global state)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

log = logging.getLogger("kswarm.metrics")


class GatewayMetrics:
    """The gateway's metrics; other components add theirs to ``registry``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.messages_posted = Counter(
            "kswarm_messages_posted", "Chat messages accepted", ["kind"], registry=self.registry
        )
        self.post_to_inbox_seconds = Histogram(
            "kswarm_post_to_inbox_seconds",
            "Time from a post being accepted to its delivery from a recipient's inbox",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=self.registry,
        )
        self.sse_clients = Gauge("kswarm_sse_clients", "Connected SSE clients", registry=self.registry)
        self.waiters = Gauge(
            "kswarm_waiters", "Blocked waits (inbox, REST and MCP) on the event hub", registry=self.registry
        )
        self.hub_wakeups = Counter(
            "kswarm_event_hub_wakeups", "Wake-up entries the event hub has read", registry=self.registry
        )
        self.redis_pool_in_use = Gauge(
            "kswarm_redis_pool_in_use", "Pooled Redis connections in use", registry=self.registry
        )
        self.redis_pool_exhausted = Counter(
            "kswarm_redis_pool_exhausted",
            "Requests refused (503) because every pooled Redis connection stayed busy",
            registry=self.registry,
        )
        self.token_checks = Counter(
            "kswarm_token_checks",
            "Token checks, by where they were answered: the replica's token cache or Redis",
            ["source"],
            registry=self.registry,
        )
        self.redis_unavailable = Counter(
            "kswarm_redis_unavailable",
            "Requests answered 503 because Redis could not be reached",
            registry=self.registry,
        )

        # Gauges whose truth lives in Redis or on disk are set at scrape time by these callbacks,
        # so every gateway replica reports the same numbers and nothing polls in between.
        self.refreshers: list[Callable[[], Awaitable[None]]] = []
        self.gate_decisions = Counter(
            "kswarm_gate_decisions",
            "Review gate decisions recorded, by action",
            ["action"],
            registry=self.registry,
        )
        self.jobs = Gauge(
            "kswarm_jobs",
            "Jobs by pool and state (queued, running)",
            ["pool", "state"],
            registry=self.registry,
        )
        self.jobs_finished = Counter(
            "kswarm_jobs_finished",
            "Jobs finished, by pool and final state",
            ["pool", "state"],
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "kswarm_queue_depth", "Jobs waiting per pool", ["pool"], registry=self.registry
        )
        self.dead_letters = Gauge(
            "kswarm_dead_letters", "Dead-lettered jobs per pool", ["pool"], registry=self.registry
        )
        self.agent_restarts = Gauge(
            "kswarm_agent_restarts",
            "Restarts of each agent by the orchestrator",
            ["agent"],
            registry=self.registry,
        )

    async def render(self) -> bytes:
        for refresh in self.refreshers:
            try:
                await refresh()
            except Exception:  # a broken source must not take the other metrics down
                log.exception("metrics refresher failed")
        return generate_latest(self.registry)
