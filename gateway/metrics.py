"""Prometheus metrics, in a registry per app (no process-global state)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


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

    def render(self) -> bytes:
        return generate_latest(self.registry)
