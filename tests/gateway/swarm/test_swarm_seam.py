"""The seam end to end: a real supervisor (real agent processes) publishing to and consuming from the
gateway's Redis; killed with SIGKILL and started again; requests it cannot do are answered."""

from __future__ import annotations

import time

import pytest
import redis as redis_sync
from swarm_kit import (
    SupervisorProcess,
    control_requests,
    report,
    running,
    supervised_swarm,
    swarm_spec,
    ui_session,
)

from gateway.swarm import keys
from gateway.swarm.models import ControlTicket, ReplyStatus, SupervisorBeat
from kstest.gateway import GatewayThread
from kstest.waiting import wait_for
from orchestrator.supervisor.control_link import ControlLink
from orchestrator.supervisor.main import make_runtime
from orchestrator.swarm_dir.provision import SwarmLayout

pytestmark = pytest.mark.slow
HTML = {"Accept": "text/html"}


def ticket(gw: GatewayThread, request_id: str) -> ControlTicket:
    with gw.client(gw.operator_token) as op:
        reply = op.get(f"/api/swarm/requests/{request_id}")
    assert reply.status_code == 200, reply.text
    return ControlTicket.model_validate(reply.json())


def agent_post_mortem(gw: GatewayThread, name: str, orchestrator: SupervisorProcess) -> str:
    """What to read when an agent is found not running: its status, its log and the supervisor's."""
    layout = SwarmLayout(gw.home)
    log = layout.log_file(name)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
    record = layout.root / "agents" / f"{name}.proc.json"
    return (
        f"{name} is not running; record {record.read_text() if record.exists() else '(none)'}\n"
        f"--- its log ---\n{tail}\n--- the supervisor's log ---\n{orchestrator.log()[-3000:]}"
    )


def test_the_panel_reports_a_dead_orchestrator_within_the_heartbeat_ttl(gateway: GatewayThread) -> None:
    ttl = 2.0
    spec = swarm_spec(gateway)
    orchestrator = SupervisorProcess(gateway, spec, heartbeat_ttl_s=ttl)
    orchestrator.start()
    runtime = make_runtime("process", SwarmLayout(gateway.home), spec)
    try:
        wait_for(lambda: running(gateway, "dev-1", "dev-2"), 60, "both agents running")
        with ui_session(gateway) as browser:
            page = browser.get("/ui/agents", headers=HTML).text
            assert "orchestrator running" in page
            assert 'data-action="restart" data-agent="dev-1">' in page  # enabled
            before = runtime.status("dev-1")
            orchestrator.kill()
            # Redis expires the heartbeat ttl seconds after the last beat; polled a little past that.
            wait_for(
                lambda: "no orchestrator running" in browser.get("/ui/agents", headers=HTML).text,
                ttl + 5,
                "the panel to see the orchestrator gone",
            )
            page = browser.get("/ui/agents", headers=HTML).text
            assert 'data-action="restart" data-agent="dev-1" disabled' in page
            assert "no orchestrator is running for this swarm" in page  # the tooltip says why
            refused = browser.post("/ui/agents/dev-1/restart", headers={"X-CSRF-Token": browser.csrf})
            assert refused.status_code == 409
            assert "no orchestrator is running for this swarm" in refused.json()["message"]
            # The last published records stay visible: the agents and their restarts.
            assert 'tr data-agent="dev-2"' in page
        with gateway.client(gateway.operator_token) as op:
            assert op.post("/api/swarm/agents/dev-1/snapshot").status_code == 409
        # kill -9 of the orchestrator leaves its agents running ...
        assert runtime.status("dev-1").running and runtime.status("dev-1").ref == before.ref
        orchestrator.start()
        # ... and the next one adopts them (the same process, not a second one) and says so.
        wait_for(lambda: report(gateway).supervising, 30, "the new orchestrator's heartbeat")
        wait_for(lambda: running(gateway, "dev-1", "dev-2"), 30, "the agents published as running")
        adopted = next(a for a in report(gateway).agents if a.name == "dev-1")
        assert adopted.ref == before.ref and adopted.restarts == 0
    finally:
        orchestrator.close()


def test_a_request_survives_a_supervisor_restart(gateway: GatewayThread) -> None:
    spec = swarm_spec(gateway, "  - pattern: dev-{i}\n    count: 3\n")
    orchestrator = SupervisorProcess(gateway, spec, heartbeat_ttl_s=2.0)
    orchestrator.start()
    runtime = make_runtime("process", SwarmLayout(gateway.home), spec)
    try:
        wait_for(lambda: running(gateway, "dev-1", "dev-2", "dev-3"), 60, "three agents running")
        dev3 = runtime.status("dev-3").ref
        orchestrator.kill()
        with gateway.client(gateway.operator_token) as op:
            first = op.post("/api/swarm/agents/dev-1/quarantine", params={"wait": 0})
            second = op.post("/api/swarm/agents/dev-2/quarantine", params={"wait": 0})
        assert first.status_code == 202 and second.status_code == 202, (first.text, second.text)
        first_id, second_id = first.json()["request_id"], second.json()["request_id"]
        assert ticket(gateway, first_id).status == ReplyStatus.queued
        # The gateway's half is done at once: dev-1's tokens are refused before any supervisor acts.
        dev1_token = SwarmLayout(gateway.home).token_file("dev-1").read_text().strip()
        with gateway.client(dev1_token) as dev1:
            assert dev1.get("/api/me").status_code == 401
        # The first request was handed to the supervisor, which died before acknowledging it: what the
        # dead process read is read here, as the group's consumer, so that it is pending, not new.
        client = redis_sync.Redis.from_url(gateway.redis_url, decode_responses=True)
        try:
            handed = client.xreadgroup(
                keys.CONTROL_GROUP, keys.CONTROL_CONSUMER, {keys.CONTROL: ">"}, count=1
            )
            assert handed[0][1][0][0] == first_id
            assert client.xpending(keys.CONTROL, keys.CONTROL_GROUP)["pending"] == 1
            # Nobody acted on either agent yet (the supervisor that read the first request is dead).
            for name in ("dev-1", "dev-2"):
                assert runtime.status(name).running, agent_post_mortem(gateway, name, orchestrator)
            orchestrator.start()
            wait_for(
                lambda: (
                    ticket(gateway, first_id).status == ReplyStatus.done
                    and ticket(gateway, second_id).status == ReplyStatus.done
                ),
                60,
                "both requests answered by the new supervisor",
            )
            assert client.xpending(keys.CONTROL, keys.CONTROL_GROUP)["pending"] == 0
        finally:
            client.close()
        assert "stopped dev-1" in ticket(gateway, first_id).message
        wait_for(
            lambda: not runtime.status("dev-1").running and not runtime.status("dev-2").running,
            30,
            "both agents stopped",
        )
        published = {a.name: a for a in report(gateway).agents}
        assert published["dev-1"].quarantined and published["dev-2"].quarantined
        assert runtime.status("dev-3").ref == dev3, "dev-3 adopted, not restarted"
        # Each request was done once: two entries, two answers, and no second quarantine of anything.
        assert [r.agent for _, r in control_requests(gateway)] == ["dev-1", "dev-2"]
    finally:
        orchestrator.close()


def test_requests_it_cannot_do_are_answered_and_supervision_goes_on(gateway: GatewayThread) -> None:
    with supervised_swarm(gateway, "  - name: dev-1\n") as supervisor:
        wait_for(lambda: running(gateway, "dev-1"), 60, "dev-1 running")
        client = redis_sync.Redis.from_url(gateway.redis_url, decode_responses=True)
        try:
            # Entries that did not come through this gateway's checks (another version, a bug): one that
            # is not a request at all, and one for an agent the swarm does not have.
            broken = client.xadd(keys.CONTROL, {keys.CONTROL_FIELD: '{"action": "format-disk"}'})
            empty = client.xadd(keys.CONTROL, {"something": "else"})
            ghost = client.xadd(
                keys.CONTROL,
                {
                    keys.CONTROL_FIELD: '{"action": "restart", "agent": "ghost", "requester": "operator", '
                    '"requested_at": 1}'
                },
            )
            for request_id, why in ((broken, "malformed request"), (empty, "gone"), (ghost, "not an agent")):
                answer = wait_for(
                    lambda rid=request_id: (t := ticket(gateway, rid)).status != ReplyStatus.queued and t,
                    30,
                    f"an answer to {request_id}",
                )
                assert answer.status == ReplyStatus.refused and why in answer.message, answer
            assert client.xpending(keys.CONTROL, keys.CONTROL_GROUP)["pending"] == 0
        finally:
            client.close()
        # Still supervising: a real restart goes through and is counted.
        with gateway.client(gateway.operator_token) as op:
            done = op.post("/api/swarm/agents/dev-1/restart")
        assert done.status_code == 200 and "restart of dev-1 requested" in done.json()["message"]
        wait_for(lambda: (a := report(gateway).agents[0]).restarts == 1 and a.running, 30, "restarted")
        assert supervisor.runtime.status("dev-1").running


def test_one_seam_per_gateway_a_second_swarm_waits_for_the_first_to_go(clean_redis: str) -> None:
    first = ControlLink(clean_redis, "a@/srv/one/swarm")
    second = ControlLink(clean_redis, "b@/srv/two/swarm")

    def beat(owner: str) -> SupervisorBeat:
        now = time.time()
        return SupervisorBeat(owner=owner, swarm="s", pid=1, host="h", started_at=now, beat_at=now, ttl_s=30)

    try:
        assert first.beat(beat(first.owner)) is True
        assert second.beat(beat(second.owner)) is False, "two swarms must not share one control group"
        assert second.deliveries(0.01) is None  # it takes no requests meant for the other
        assert first.beat(beat(first.owner)) is True  # a beat of the holder refreshes it
        first.retire()
        assert second.beat(beat(second.owner)) is True
    finally:
        first.close()
        second.close()


def test_supervision_goes_on_without_the_gateways_redis(gateway: GatewayThread) -> None:
    gone = f"unix://{gateway.home}/no-redis-here.sock"
    with supervised_swarm(gateway, "  - name: dev-1\n", redis_url=gone) as supervisor:
        wait_for(lambda: supervisor.runtime.status("dev-1").running, 60, "dev-1 running without the seam")
        assert not report(gateway).known  # nothing published, and nothing broke


def test_the_rest_client_restarts_quarantines_and_reads_memory(gateway: GatewayThread) -> None:
    """``gateway.swarm.client.SwarmApi``: what ``kswarm agent ...`` uses where the home is not shared."""
    from gateway.client.http import GatewayCallError, GatewayClient, GatewayTarget
    from gateway.swarm.client import SwarmApi
    from gateway.swarm.models import ControlAction, ControlBody

    with (
        supervised_swarm(gateway, "  - name: dev-1\n"),
        GatewayClient(GatewayTarget(token=gateway.operator_token, url=gateway.url)) as client,
    ):
        api = SwarmApi(client)
        wait_for(lambda: running(gateway, "dev-1"), 60, "dev-1 running")
        assert api.report().status is not None and api.report().status.agents == ["dev-1"]
        assert api.memory("dev-1").memory_md.startswith("# Memory of dev-1")
        before = api.agent("dev-1")
        after = api.restart("dev-1", wait_s=30)
        assert after is not None and before is not None and after.ref != before.ref and after.restarts == 1
        snap = api.act("dev-1", ControlAction.snapshot, ControlBody(label="cli"))
        assert snap.status == ReplyStatus.done and "-cli" in snap.message
        held = api.act("dev-1", ControlAction.quarantine)
        assert held.status == ReplyStatus.done and "token(s) revoked" in held.message
        with pytest.raises(GatewayCallError) as refused:
            api.act("dev-1", ControlAction.restart)
        assert refused.value.status == 409 and "release it first" in refused.value.detail
        assert api.act("dev-1", ControlAction.release).status == ReplyStatus.done
        wait_for(lambda: running(gateway, "dev-1"), 60, "dev-1 running again after release")


def test_an_agent_cannot_blind_the_seam_with_a_file_name(gateway: GatewayThread) -> None:
    """An agent plants a memory file whose name is no UTF-8 (and a huge MEMORY.md): the supervisor
    keeps publishing and taking requests."""
    with supervised_swarm(gateway, "  - name: dev-1\n") as supervisor:
        wait_for(lambda: running(gateway, "dev-1"), 60, "dev-1 running")
        memory_dir = supervisor.layout.agent_dir("dev-1", "memory")
        planted = supervisor.runtime.exec(
            "dev-1",
            [
                "sh",
                "-c",
                f"touch {memory_dir}/\"$(printf 'bad\\377name')\" && head -c 3000000 /dev/zero "
                f"| tr '\\0' x >> {memory_dir}/MEMORY.md",
            ],
        )
        assert planted.returncode == 0, planted.output

        def shows_the_planted_name() -> bool:
            with gateway.client(gateway.operator_token) as op:
                summary = op.get("/api/swarm/agents/dev-1/memory").json()
            return summary["memory_md_truncated"] and any("bad" in name for name, _ in summary["files"])

        wait_for(shows_the_planted_name, 30, "the planted memory published")
        with gateway.client(gateway.operator_token) as op:
            done = op.post("/api/swarm/agents/dev-1/restart")
        assert done.status_code == 200, done.text
        wait_for(lambda: (a := report(gateway).agents[0]).restarts == 1 and a.running, 30, "restarted")
        assert report(gateway).supervising
