"""The task board against a real gateway and Redis: racing claims, leases that lapse and are announced,
renew-on-heartbeat, who may do what, and the MCP tools."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from boardkit import BoardGateway, post_task
from redis.asyncio import Redis

from gateway.tasks.board import TaskBoard
from gateway.tasks.models import TaskSpec
from kstest.mcp_client import ToolFailed, call, mcp_session

AGENTS = [f"a{i}" for i in range(1, 9)]
BOARD_TOOLS = {"task_list", "task_claim", "task_renew", "task_release", "task_done", "task_post"}


def general(gw: BoardGateway) -> list[str]:
    with gw.client(gw.operator_token) as op:
        reply = op.get("/api/channels/general/messages", params={"limit": 500})
    return [m["text"] for m in reply.json()["messages"]]


def wait_for(predicate, timeout: float = 10.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


async def test_taskboard_race_exactly_one_claimant_wins(board_gw: BoardGateway) -> None:
    """Eight agents claim the same task at the same moment, for 25 tasks: one winner each time."""
    ids = [f"race-{i}" for i in range(25)]
    for task_id in ids:
        post_task(board_gw, task_id)
    clients = {a: board_gw.async_client(board_gw.tokens[a]) for a in AGENTS}
    try:
        for task_id in ids:
            start = asyncio.Event()

            async def claim(agent: str, path: str, start: asyncio.Event) -> httpx.Response:
                await start.wait()
                return await clients[agent].post(path)

            racers = [asyncio.create_task(claim(a, f"/api/tasks/{task_id}/claim", start)) for a in AGENTS]
            await asyncio.sleep(0)
            start.set()
            replies = await asyncio.gather(*racers)
            winners = [a for a, r in zip(AGENTS, replies, strict=True) if r.status_code == 200]
            assert len(winners) == 1, [(r.status_code, r.text) for r in replies]
            won = next(r for r in replies if r.status_code == 200).json()
            assert (won["state"], won["holder"], won["claims"]) == ("claimed", winners[0], 1)
            losers = [r for r in replies if r.status_code != 200]
            assert all(r.status_code == 409 and f"claimed by {winners[0]}" in r.text for r in losers)
            # let go (else after two wins an agent is at its claim limit and the race is unfair)
            released = await clients[winners[0]].post(f"/api/tasks/{task_id}/release")
            assert released.status_code == 200, released.text
        # Leases are short here (2 s) and may have lapsed since; the claim count cannot lie.
        board = {t["id"]: t for t in (await clients["a1"].get("/api/tasks", params={"state": "all"})).json()}
        assert all(board[task_id]["claims"] == 1 for task_id in ids), "never a second successful claim"
    finally:
        for c in clients.values():
            await c.aclose()


def test_taskboard_lapsed_claim_is_announced_and_reclaimable(board_gw: BoardGateway) -> None:
    post_task(board_gw, "lapse")
    a1, a2 = board_gw.client(board_gw.tokens["a1"]), board_gw.client(board_gw.tokens["a2"])
    with a1, a2:
        claimed = a1.post("/api/tasks/lapse/claim").json()
        assert claimed["holder"] == "a1" and claimed["expires_at"] > time.time()
        assert a2.post("/api/tasks/lapse/claim").status_code == 409
        # a1 "crashes": no renewals, no heartbeats. The lease lapses and #general hears of it once.
        wait_for(lambda: any("@a1's claim on task `lapse` lapsed" in t for t in general(board_gw)))
        assert a1.get("/api/tasks/lapse").json()["state"] == "open"
        again = a2.post("/api/tasks/lapse/claim")
        assert again.status_code == 200 and again.json()["holder"] == "a2" and again.json()["claims"] == 2
        late = a1.post("/api/tasks/lapse/renew")
        assert late.status_code == 409 and "claimed by a2" in late.text
        assert a1.post("/api/tasks/lapse/done", json={"result": "mine"}).status_code == 409
        inbox = a1.get("/api/inbox").json()
        assert any(i["reason"] == "notice" and "lapse" in i["text"] for i in inbox["items"]), inbox
        done = a2.post("/api/tasks/lapse/done", json={"result": "PR #1"}).json()
        assert (done["state"], done["done_by"], done["result"]) == ("done", "a2", "PR #1")
    time.sleep(2.5)  # a done task's lease is gone with it: nothing more is announced
    assert sum("`lapse` lapsed" in t for t in general(board_gw)) == 1


def test_taskboard_heartbeats_renew_and_explicit_renew(board_gw: BoardGateway) -> None:
    post_task(board_gw, "beat")
    post_task(board_gw, "renew")
    with board_gw.client(board_gw.tokens["a3"]) as a3:
        assert a3.post("/api/tasks/beat/claim").status_code == 200
        assert a3.post("/api/tasks/renew/claim").status_code == 200
        deadline = time.monotonic() + 4.5  # more than twice the 2 s lease
        while time.monotonic() < deadline:
            a3.post("/api/heartbeat", json={"state": "working", "doing": "beat"}).raise_for_status()
            assert a3.post("/api/tasks/renew/renew").status_code == 200
            time.sleep(0.3)
        assert a3.get("/api/tasks/beat").json()["holder"] == "a3", "heartbeats kept the claim"
        assert a3.get("/api/tasks/renew").json()["holder"] == "a3", "renewals kept the claim"
        # The agent stops beating (crashed): the claim lapses within a lease and a sweep.
        wait_for(lambda: a3.get("/api/tasks/beat").json()["state"] == "open", timeout=12)


def test_taskboard_permissions_and_identity(board_gw: BoardGateway) -> None:
    gw = board_gw
    a4, a5, op = gw.client(gw.tokens["a4"]), gw.client(gw.tokens["a5"]), gw.client(gw.operator_token)
    with a4, a5, op:
        refused = a4.post("/api/tasks", json={"id": "lead-task", "title": "x"})
        assert refused.status_code == 403
        assert op.put("/api/tasks/leads/a4").status_code == 204
        assert "a4" in op.get("/api/tasks/leads").json()
        posted = a4.post("/api/tasks", json={"id": "lead-task", "title": "x"}).json()
        assert posted["posted_by"] == "a4" and posted["repo"] == "kswarm/dataset"
        forged = a4.post("/api/tasks", json={"id": "forged", "title": "x", "posted_by": "a5"})
        assert forged.status_code == 422, "the poster comes from the token, not the body"
        assert a4.post("/api/tasks", json={"id": "lead-task", "title": "x"}).status_code == 409
        with gw.client(gw.tokens["worker1"]) as w:
            assert w.post("/api/tasks/lead-task/claim").status_code == 403
        assert a5.post("/api/tasks/lead-task/claim").json()["holder"] == "a5"
        assert a4.post("/api/tasks/lead-task/release").status_code == 409, "only the holder releases"
        assert a4.post("/api/tasks/lead-task/done", json={}).status_code == 409
        assert a5.post("/api/tasks/lead-task/claim").status_code == 200, "claiming again renews"
        assert a5.post("/api/tasks/lead-task/release").json()["state"] == "open"
        assert a4.post("/api/tasks/lead-task/claim").json()["holder"] == "a4"
        assert op.post("/api/tasks/lead-task/release").json()["state"] == "open", "operators may force"
        assert a4.post("/api/tasks/nope/claim").status_code == 404
        assert op.delete("/api/tasks/lead-task").status_code == 204
        assert a4.get("/api/tasks/lead-task").status_code == 404


async def test_taskboard_mcp_tools(board_gw: BoardGateway) -> None:
    post_task(board_gw, "mcp-task", description="build it", labels=["elementwise"])
    async with mcp_session(board_gw.url, board_gw.tokens["a6"]) as a6:
        tools = {t.name: t for t in (await a6.list_tools()).tools}
        assert BOARD_TOOLS <= set(tools)
        assert all(len(tools[n].description or "") <= 120 for n in BOARD_TOOLS)
        size = len(json.dumps([tools[n].model_dump(by_alias=True, exclude_none=True) for n in BOARD_TOOLS]))
        assert size < 3000, size
        listed = await call(a6, "task_list")
        assert "mcp-task" in {t["id"] for t in listed}
        claimed = await call(a6, "task_claim", id="mcp-task")
        assert claimed["holder"] == "a6" and claimed["description"] == "build it"
        with pytest.raises(ToolFailed, match="may not post"):
            await call(a6, "task_post", id="x-task", title="x")
    async with mcp_session(board_gw.url, board_gw.tokens["a7"]) as a7:
        with pytest.raises(ToolFailed, match="claimed by a6"):
            await call(a7, "task_claim", id="mcp-task")
        with pytest.raises(ToolFailed, match=r"does not hold|claimed by a6"):
            await call(a7, "task_done", id="mcp-task")
    async with mcp_session(board_gw.url, board_gw.tokens["a6"]) as a6:
        assert (await call(a6, "task_renew", id="mcp-task"))["holder"] == "a6"
        done = await call(a6, "task_done", id="mcp-task", result="PR #7")
        assert done["state"] == "done"
        assert "mcp-task" in {t["id"] for t in await call(a6, "task_list", state="done")}
    assert any("a6 finished task `mcp-task`: PR #7" in t for t in general(board_gw))


async def test_taskboard_lapse_announced_even_when_reclaimed_before_the_sweep(redis_url: str) -> None:
    """No sweeper runs here (a database of its own): a new claim queues the old one's lapse, once."""
    redis = Redis.from_url(redis_url, db=7, decode_responses=True)
    await redis.flushdb()
    try:
        board = TaskBoard(redis, claim_ttl_s=0.2)
        await board.post(TaskSpec(id="t", title="t"), "operator")
        await board.claim("t", "a1")
        await asyncio.sleep(0.35)
        task, fresh = await board.claim("t", "a2")
        assert fresh and task.holder == "a2"
        assert await board.sweep() == 0, "a live lease is not lapsed"
        lapsed = await board.pop_expired()
        assert [(e["task"], e["agent"]) for e in lapsed] == [("t", "a1")]
        await asyncio.sleep(0.35)
        assert await board.sweep() == 1
        assert [(e["task"], e["agent"]) for e in await board.pop_expired()] == [("t", "a2")]
        assert await board.pop_expired() == []
    finally:
        await redis.aclose()
