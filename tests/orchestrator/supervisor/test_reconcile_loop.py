"""The reconcile logic on a fake runtime and a fake clock: backoff, crash loop, recovery, removal, stall."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import orchestrator.supervisor.reconcile as reconcile
from gateway.swarm.models import ControlRequest, ReplyStatus
from orchestrator.runtime.base import ExecResult, LaunchSpec, RuntimeStatus
from orchestrator.spec import parse_spec
from orchestrator.supervisor.control import ControlHandler
from orchestrator.supervisor.control_link import Delivery
from orchestrator.supervisor.reconcile import Reconciler, backoff_delay, load_record
from orchestrator.swarm_dir.provision import SwarmLayout


class FakeRuntime:
    backend = "fake"

    def __init__(self) -> None:
        self.running: dict[str, bool] = {}
        self.starts: list[str] = []
        self.removed: list[str] = []

    def start(self, launch: LaunchSpec) -> RuntimeStatus:
        self.running[launch.agent.name] = True
        self.starts.append(launch.agent.name)
        return RuntimeStatus(launch.agent.name, True, started_at=None)

    def stop(self, name: str, timeout: float = 10.0) -> None:
        self.running[name] = False

    def status(self, name: str) -> RuntimeStatus:
        return RuntimeStatus(
            name, self.running.get(name, False), exit_code=None if self.running.get(name) else 7
        )

    def list(self) -> dict[str, RuntimeStatus]:
        return {n: self.status(n) for n in self.running}

    def logs(self, name: str, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        return iter(())

    def exec(self, name: str, argv: list[str], timeout: float = 60.0) -> ExecResult:
        return ExecResult(0, "")

    def remove(self, name: str, purge: bool = False) -> None:
        self.running.pop(name, None)
        self.removed.append(name)


class FakeClient:
    def __init__(self) -> None:
        self.posts: list[str] = []
        self.beats: dict[str, float] = {}
        self.revoked: list[str] = []

    def revoke_tokens(self, name: str) -> int:
        self.revoked.append(name)
        return 0

    def post(self, channel: str, text: str) -> dict:
        assert channel == "ops"
        self.posts.append(text)
        return {}

    def agents(self) -> list[dict]:
        return [{"name": n, "last_heartbeat": t} for n, t in self.beats.items()]


SPEC = """
swarm: fake
agents:
  - pattern: a-{i}
    count: 2
lifecycle: {backoff_base_s: 1, backoff_max_s: 4, crash_loop_after: 3, crash_window_s: 100,
            stable_after_s: 50, stall_after_s: 20}
"""


@pytest.fixture
def loop(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(reconcile, "provision", lambda *a, **k: "ksw_fake")
    runtime, client = FakeRuntime(), FakeClient()
    spec = parse_spec(SPEC)
    rec = Reconciler(spec, runtime, SwarmLayout(tmp_path), client, tmp_path / "gw.sock", 20000, False)  # type: ignore[arg-type]
    return rec, runtime, client


def test_backoff_doubles_and_is_capped() -> None:
    assert [backoff_delay(n, 1, 10) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]


def test_crashes_back_off_then_crash_loop_then_recover(loop) -> None:
    rec, runtime, client = loop
    rec.reconcile_once(now=1000)
    assert runtime.starts == ["a-1", "a-2"]
    state = lambda: load_record(rec.layout, "a-1", "fake")  # noqa: E731

    runtime.running["a-1"] = False  # crash 1
    rec.reconcile_once(now=1001)
    assert state().state == "backoff" and state().next_start_at == 1002 and state().last_exit == 7
    rec.reconcile_once(now=1001.5)
    assert runtime.starts.count("a-1") == 1  # still backing off
    rec.reconcile_once(now=1002)
    assert runtime.starts.count("a-1") == 2 and state().restarts == 1

    runtime.running["a-1"] = False  # crash 2: delay doubles
    rec.reconcile_once(now=1003)
    assert state().next_start_at == 1005
    rec.reconcile_once(now=1005)
    runtime.running["a-1"] = False  # crash 3: crash-loop, announced once
    rec.reconcile_once(now=1006)
    assert state().state == "crash-loop" and state().next_start_at == 1010
    assert sum("crash loop" in p for p in client.posts) == 1
    rec.reconcile_once(now=1010)
    assert runtime.running["a-1"] and state().restarts == 3
    rec.reconcile_once(now=1011)
    assert state().state == "running"
    rec.reconcile_once(now=1011 + 51)  # stable long enough: the crash history is forgotten
    assert state().crashes == []


def test_stall_is_announced_once_and_cleared_by_a_heartbeat(loop) -> None:
    rec, _, client = loop
    client.beats = {"a-1": 1000.0, "a-2": 1000.0}
    rec.reconcile_once(now=1000)
    rec.reconcile_once(now=1010)
    client.beats["a-2"] = 1025.0
    rec.reconcile_once(now=1030)
    rec.reconcile_once(now=1031)
    assert load_record(rec.layout, "a-1", "fake").state == "stalled"
    assert load_record(rec.layout, "a-2", "fake").state == "running"
    assert [p for p in client.posts if "stalled" in p] == ["agent a-1 is stalled: no heartbeat for 30s"]
    client.beats["a-1"] = 1032.0
    rec.reconcile_once(now=1033)
    assert load_record(rec.layout, "a-1", "fake").state == "running"
    assert any("a-1 is heartbeating again" in p for p in client.posts)


def test_agents_no_longer_in_the_spec_are_removed(loop) -> None:
    rec, runtime, _ = loop
    rec.reconcile_once(now=1000)
    runtime.running["old"] = True  # e.g. the spec shrank since the last orchestrator
    rec.reconcile_once(now=1001)
    assert runtime.removed == ["old"] and set(runtime.running) == {"a-1", "a-2"}


def test_a_failed_start_backs_off_with_the_reason(loop, monkeypatch) -> None:
    rec, runtime, _ = loop

    def broken(*a, **k):
        raise RuntimeError("no such image")

    monkeypatch.setattr(runtime, "start", broken)
    rec.reconcile_once(now=1000)
    record = load_record(rec.layout, "a-1", "fake")
    assert record.state == "backoff" and "no such image" in record.last_error


def test_process_backend_warns_when_it_cannot_isolate(tmp_path: Path) -> None:
    from orchestrator.runtime.process import ProcessRuntime, can_isolate_by_uid, namespaces_unavailable

    if os.geteuid() == 0:  # as root, "none" would run agents as root on the host's network: refused
        with pytest.raises(RuntimeError, match="as root"):
            ProcessRuntime(SwarmLayout(tmp_path), "s", "none").warning  # noqa: B018
    else:
        assert ProcessRuntime(SwarmLayout(tmp_path), "s", "none").warning is not None
    auto = ProcessRuntime(SwarmLayout(tmp_path), "s", "auto")
    assert (auto.warning is None) == (can_isolate_by_uid() or namespaces_unavailable() is None)
    assert auto.mode == ("uid" if can_isolate_by_uid() else "userns")  # CI has one or the other


def ask(handler: ControlHandler, action: str, agent: str = "a-1") -> tuple[ReplyStatus, str]:
    return handler.handle(ControlRequest(action=action, agent=agent, requester="operator", requested_at=1))


def test_control_requests_act_through_the_markers_and_twice_is_once(loop) -> None:
    rec, runtime, client = loop
    handler = ControlHandler(rec.spec, rec.layout, runtime, client)  # type: ignore[arg-type]
    rec.reconcile_once(now=1000)
    assert rec.observed["a-1"].running
    state = lambda: load_record(rec.layout, "a-1", "fake")  # noqa: E731

    # Quarantine, twice (a request read again after a crash before its acknowledgement): one hold.
    for _ in range(2):
        status, message = ask(handler, "quarantine")
        assert status == ReplyStatus.done and "stays stopped" in message
    assert runtime.running["a-1"] is False
    rec.reconcile_once(now=1001)
    rec.reconcile_once(now=1010)
    assert state().state == "quarantined" and runtime.starts.count("a-1") == 1
    assert not rec.observed["a-1"].running
    assert ask(handler, "restart") == (ReplyStatus.refused, "a-1 is quarantined: release it first")

    # Release: tokens minted while held are revoked (it starts with a fresh one), then it starts.
    client.revoked.clear()
    assert ask(handler, "release")[0] == ReplyStatus.done and client.revoked == ["a-1"]
    rec.reconcile_once(now=1011)
    assert runtime.starts.count("a-1") == 2 and state().restarts == 0
    again = ask(handler, "release")  # already released: nothing revoked from the running agent
    assert again[0] == ReplyStatus.done and "not held" in again[1] and client.revoked == ["a-1"]

    # Restart: one marker, one restart (asked for: not a crash).
    assert ask(handler, "restart")[0] == ReplyStatus.done
    rec.reconcile_once(now=1012)
    assert runtime.starts.count("a-1") == 3 and state().restarts == 1 and state().crashes == []

    assert ask(handler, "restart", agent="ghost")[0] == ReplyStatus.refused
    # A memory action on an agent without a memory dir (provisioning is faked here) is answered.
    request = ControlRequest(action="snapshot", agent="a-2", requester="operator", requested_at=1)
    reply = handler.answer(Delivery("1-0", request))
    assert reply.status == ReplyStatus.refused and "no memory dir" in reply.message
    assert reply.request_id == "1-0" and reply.agent == "a-2"
