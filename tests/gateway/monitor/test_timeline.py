"""Agent timelines over REST: an agent writes only its own, reads only its own; operators read all; live,
paged, searchable; "doing" is the running tool call or the last one with its age."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from monitor_kit import MonitorGateway, entry

from kstest.sse import read_events


def post(gw: MonitorGateway, token: str, *entries: dict) -> httpx.Response:
    with gw.client(token) as c:
        return c.post("/api/timeline", json={"entries": list(entries)})


def timeline(gw: MonitorGateway, token: str, name: str, **params: str) -> httpx.Response:
    with gw.client(token) as c:
        return c.get(f"/api/agents/{name}/timeline", params=params)


def test_an_agent_reports_its_timeline_and_the_operator_reads_it(mon_gateway: MonitorGateway) -> None:
    dev = mon_gateway.add_principal("dev-1")
    call = entry("tool_call", "bash", name="bash", input={"command": "git commit -m 'softmax'"}, call_id="c1")
    reply = post(mon_gateway, dev, entry("wake", "woken by a DM"), call)
    assert reply.status_code == 200 and reply.json()["agent"] == "dev-1" and reply.json()["stored"] == 2
    page = timeline(mon_gateway, mon_gateway.operator_token, "dev-1").json()
    assert [e["kind"] for e in page["entries"]] == ["tool_call", "wake"]  # newest first
    assert page["entries"][0]["agent"] == "dev-1" and page["entries"][0]["call_id"] == "c1"
    assert page["doing"].startswith("running bash(git commit -m 'softmax') for ")
    result = entry(
        "tool_result", "bash ok", name="bash", content="[dev-1/softmax 1a2b3c4] softmax", call_id="c1"
    )
    post(mon_gateway, dev, result)
    doing = timeline(mon_gateway, mon_gateway.operator_token, "dev-1").json()["doing"]
    assert doing.startswith("last: bash(git commit -m 'softmax'), ") and doing.endswith(" ago")
    # The agent reads its own timeline.
    assert timeline(mon_gateway, dev, "dev-1").status_code == 200


def test_paging_search_and_kinds(mon_gateway: MonitorGateway) -> None:
    dev = mon_gateway.add_principal("dev-1")
    for i in range(30):
        post(mon_gateway, dev, entry("tool_call", f"step {i}", name="bash", input={"command": f"echo n{i}"}))
    post(mon_gateway, dev, entry("model", "claude: 10 in / 5 out", model="m", usage={"input_tokens": 10}))
    op = mon_gateway.operator_token
    first = timeline(mon_gateway, op, "dev-1", limit="10").json()
    assert len(first["entries"]) == 10 and first["more"]
    second = timeline(mon_gateway, op, "dev-1", limit="10", before=first["entries"][-1]["id"]).json()
    assert {e["id"] for e in first["entries"]}.isdisjoint(e["id"] for e in second["entries"])
    assert second["entries"][0]["id"] < first["entries"][-1]["id"]
    found = timeline(mon_gateway, op, "dev-1", q="echo n17").json()["entries"]
    assert [e["summary"] for e in found] == ["step 17"]
    models = timeline(mon_gateway, op, "dev-1", kind="model").json()["entries"]
    assert [e["kind"] for e in models] == ["model"]
    assert timeline(mon_gateway, op, "dev-1", kind="bogus").status_code == 400


def test_a_new_entry_arrives_on_the_live_stream(mon_gateway: MonitorGateway) -> None:
    dev = mon_gateway.add_principal("dev-1")

    async def follow() -> dict:
        async with mon_gateway.async_client(mon_gateway.operator_token) as c:
            async with c.stream("GET", "/api/agents/dev-1/timeline/events") as stream:
                assert stream.status_code == 200
                await asyncio.sleep(0.3)
                await asyncio.to_thread(post, mon_gateway, dev, entry("tool_call", "pr_open", name="pr_open"))
                async for event in read_events(stream):
                    return event.data
        raise AssertionError("stream ended")

    got = asyncio.run(asyncio.wait_for(follow(), 20))
    assert got["kind"] == "tool_call" and got["summary"] == "pr_open" and got["agent"] == "dev-1"


# -- attacks ---------------------------------------------------------------------------------------


def test_attack_an_agent_cannot_write_another_agents_timeline(mon_gateway: MonitorGateway) -> None:
    mallory = mon_gateway.add_principal("mallory")
    mon_gateway.add_principal("dev-2")
    forged = entry("tool_call", "rm -rf /", name="bash") | {"agent": "dev-2"}
    assert post(mon_gateway, mallory, forged).status_code == 422  # no field names the agent
    with mon_gateway.client(mallory) as c:
        sideways = c.post("/api/agents/dev-2/timeline", json={"entries": [entry("note")]})
        assert sideways.status_code in (404, 405)  # no route writes a named agent's timeline
        assert c.post("/api/timeline", json={"entries": [entry("note")], "agent": "dev-2"}).status_code == 422
    # What it can write lands in its own timeline only.
    assert post(mon_gateway, mallory, entry("note", "mine")).status_code == 200
    op = mon_gateway.operator_token
    assert timeline(mon_gateway, op, "dev-2").json()["entries"] == []
    assert [e["agent"] for e in timeline(mon_gateway, op, "mallory").json()["entries"]] == ["mallory"]


def test_attack_only_agents_write_timelines(mon_gateway: MonitorGateway) -> None:
    worker = mon_gateway.add_principal("w-1", "worker")
    gate = mon_gateway.add_principal("gatekeeper", "gate")
    for token in (mon_gateway.operator_token, worker, gate):
        reply = post(mon_gateway, token, entry("note", "as an agent?"))
        assert reply.status_code == 403, reply.text
    with mon_gateway.client(None) as anon:
        assert anon.post("/api/timeline", json={"entries": [entry("note")]}).status_code == 401


def test_attack_an_agent_cannot_read_another_agents_timeline(mon_gateway: MonitorGateway) -> None:
    dev = mon_gateway.add_principal("dev-1")
    mallory = mon_gateway.add_principal("mallory")
    post(mon_gateway, dev, entry("tool_result", "chat_read", name="chat_read", content="DM: the secret plan"))
    assert timeline(mon_gateway, mallory, "dev-1").status_code == 403
    with mon_gateway.client(mallory) as c:
        assert c.get("/api/agents/dev-1/timeline/events").status_code == 403


def test_attack_oversized_or_malformed_entries_are_refused_whole(mon_gateway: MonitorGateway) -> None:
    dev = mon_gateway.add_principal("dev-1")
    huge = entry("tool_result", "big", content="x" * 20_000)
    assert post(mon_gateway, dev, entry("note", "ok"), huge).status_code == 422
    assert post(mon_gateway, dev, entry("nonsense")).status_code == 422
    assert post(mon_gateway, dev, *[entry("note")] * 201).status_code == 422
    assert (
        timeline(mon_gateway, mon_gateway.operator_token, "dev-1").json()["entries"] == []
    )  # nothing half-done


@pytest.mark.slow
def test_the_timeline_keeps_a_bounded_length(clean_redis: str, short_tmp) -> None:
    from monitor_kit import fast_monitor

    gw = MonitorGateway(short_tmp / "home", clean_redis)
    gw.monitor_settings = fast_monitor(timeline_maxlen=100)
    gw.start()
    try:
        dev = gw.add_principal("dev-1")
        for _ in range(10):
            post(gw, dev, *[entry("note", "n")] * 100)
        kept = timeline(gw, gw.operator_token, "dev-1", limit="500").json()["entries"]
        assert 100 <= len(kept) < 1000  # approximate trimming: bounded, never the whole history
    finally:
        gw.stop()
