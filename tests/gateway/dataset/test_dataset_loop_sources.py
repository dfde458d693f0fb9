"""The build's gateway sources of issue 27's facts: an author's timeline read from the monitor (only the
wakes, model and tool calls in the window; no tool output), and the counterexamples listed by
``GET /api/counterexamples?repo=`` (404 on a gateway without the route: unknown, not zero)."""

from __future__ import annotations

import time
from typing import Any

from gateway.client import GatewayClient, GatewayTarget, Missing
from gateway.dataset.loop_sources import GatewayCounterexampleSource, GatewayTimelineSource
from kstest.gateway import GatewayThread


def test_the_timeline_source_reads_the_window_of_wakes_model_and_tool_calls(gateway: GatewayThread) -> None:
    agent = gateway.add_principal("dev-1")
    now = time.time()
    entries = [
        {"kind": "wake", "ts": now - 30, "summary": "too early"},
        {"kind": "wake", "ts": now - 3, "summary": "woken"},
        {"kind": "model", "ts": now - 2, "summary": "scripted", "data": {"model": "scripted"}},
        {"kind": "tool_result", "ts": now - 1.5, "summary": "output", "data": {"content": "a DM"}},
        {"kind": "tool_call", "ts": now - 1, "summary": "bash", "data": {"input": {"command": "ls"}}},
        {"kind": "model", "ts": now + 10, "summary": "after"},
    ]
    with gateway.client(agent) as c:
        assert c.post("/api/timeline", json={"entries": entries}).status_code == 200
    with GatewayClient(GatewayTarget(token=gateway.operator_token, url=gateway.url)) as client:
        source = GatewayTimelineSource(client)
        got = source.entries("dev-1", now - 10, now)
        assert [(e["kind"], e["summary"]) for e in got or []] == [
            ("wake", "woken"), ("model", "scripted"), ("tool_call", "bash"),
        ]  # fmt: skip
        assert source.entries("nobody", now - 10, now) == []


class FakeGateway:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def get(self, path: str, **params: Any) -> Any:
        assert path == "/api/counterexamples" and params == {"repo": "kswarm/dataset"}
        if self.answer is None:
            raise Missing(404, "Not Found")
        return self.answer


def test_the_counterexample_source_reads_the_documented_shape_and_tolerates_no_route() -> None:
    record = {
        "id": "cx0123456789ab", "finder": "red-1", "task": "add", "repo": "kswarm/dataset",
        "kernel": "kernels/add/a.py", "sha": "a" * 40, "status": "confirmed", "job": "j1",
        "created_at": 1.0, "input": {"case": {"n": 3}, "dtype": "float32"}, "withdrew": ["j0"],
    }  # fmt: skip
    unreadable = {"id": "cx1", "status": "confirmed"}
    listed = GatewayCounterexampleSource(FakeGateway([record, unreadable])).counterexamples("kswarm/dataset")  # type: ignore[arg-type]
    assert [(c.id, c.status, c.finder, c.job) for c in listed or []] == [
        ("cx0123456789ab", "confirmed", "red-1", "j1")
    ]
    assert GatewayCounterexampleSource(FakeGateway(None)).counterexamples("kswarm/dataset") is None  # type: ignore[arg-type]
