"""The queue on real Redis (bundled 6.2 and system 7.x): fairness, reclaim, dead letters, idempotent
results, cancellation and the per-agent limits."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from gateway.client.jobs.models import Job, JobState, new_job_id
from gateway.errors import RuleViolation
from gateway.jobs.queue import JobQueue
from orchestrator.local.embedded_redis import EmbeddedRedis, bundled_redis_server


def _binaries() -> list:
    found = [pytest.param(bundled_redis_server(), id="redis-6.2")]
    system = shutil.which("redis-server", path="/usr/bin:/usr/local/bin")
    marks = [] if system else [pytest.mark.skip(reason="no system redis-server (7.x) installed")]
    found.append(pytest.param(Path(system) if system else None, id="redis-system", marks=marks))
    return found


@pytest.fixture(scope="module", params=_binaries())
def redis_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="ksq"))
    server = EmbeddedRedis(home, binary=request.param)
    url = server.ensure_running()
    request.addfinalizer(lambda: (server.release(), shutil.rmtree(home, ignore_errors=True)))
    return url


@pytest.fixture
async def queue(redis_server: str) -> AsyncIterator[JobQueue]:
    redis = Redis.from_url(redis_server, decode_responses=True)
    await redis.flushall()
    yield JobQueue(redis)
    await redis.aclose()


def make_job(submitter: str, pool: str = "cpu", devices: int = 1, **extra: object) -> Job:
    fields: dict = dict(
        id=new_job_id(),
        submitter=submitter,
        repo="kswarm/kernels",
        ref="main",
        sha="a" * 40,
        task="add",
        kernel="kernels/add/k.py",
        pool=pool,
        devices=devices,
        timeout_s=60,
        submitted=time.time(),
        max_attempts=2,
    )
    fields.update(extra)
    return Job(**fields)


async def test_one_agents_fifty_jobs_do_not_starve_anothers_one(queue: JobQueue) -> None:
    alice = [await queue.submit(make_job("alice"), 100) for _ in range(50)]
    bob = await queue.submit(make_job("bob"), 100)
    order = []
    for _ in range(51):  # one slot: take, finish, take ...
        taken = await queue.take("cpu", "w/1", "local", 1, max_running=100)
        assert taken is not None
        order.append(taken.job.id)
        await queue.finish(taken.job.id, "w/1", taken.attempt, JobState.succeeded)
    assert order.index(bob.id) <= 1, "bob's single job waited behind alice's queue"
    assert [i for i in order if i != bob.id] == [j.id for j in alice], "alice's own jobs stay in order"
    assert await queue.take("cpu", "w/1", "local", 1, max_running=100) is None


async def test_round_robin_between_busy_agents(queue: JobQueue) -> None:
    for who in ("alice", "bob", "carol"):
        for _ in range(4):
            await queue.submit(make_job(who), 100)
    order = []
    for _ in range(12):
        taken = await queue.take("cpu", "w/1", "local", 1, max_running=100)
        assert taken is not None
        order.append(taken.job.submitter)
        await queue.finish(taken.job.id, "w/1", taken.attempt, JobState.succeeded)
    for i in range(0, 12, 3):
        assert sorted(order[i : i + 3]) == ["alice", "bob", "carol"], order


async def test_reproductions_go_first_and_running_limit_holds(queue: JobQueue) -> None:
    first = await queue.submit(make_job("alice"), 10)
    second = await queue.submit(make_job("alice"), 10)
    repro = await queue.submit(make_job("bob", priority="reproduction", reproduce_pr=3), 10)
    taken = await queue.take("cpu", "w/1", "local", 4, max_running=1)
    assert taken is not None and taken.job.id == repro.id
    taken = await queue.take("cpu", "w/1", "local", 4, max_running=1)
    assert taken is not None and taken.job.id == first.id
    assert await queue.take("cpu", "w/1", "local", 4, max_running=1) is None, "alice is at her running limit"
    await queue.finish(first.id, "w/1", taken.attempt, JobState.succeeded)
    taken = await queue.take("cpu", "w/1", "local", 4, max_running=1)
    assert taken is not None and taken.job.id == second.id


async def test_gang_job_waits_for_all_its_devices(queue: JobQueue) -> None:
    big = await queue.submit(make_job("alice", pool="npu", devices=8), 10)
    await queue.submit(make_job("bob", pool="npu", devices=8), 10)
    assert await queue.take("npu", "w/1", "n0", 4, max_running=2) is None, "8 cards never start on 4 free"
    taken = await queue.take("npu", "w/1", "n0", 8, max_running=2, free_ids=[str(i) for i in range(8)])
    assert taken is not None and taken.job.id == big.id
    assert taken.job.allocated == [str(i) for i in range(8)] and taken.job.node == "n0"


async def test_max_queued_refused_naming_the_rule(queue: JobQueue) -> None:
    for _ in range(3):
        await queue.submit(make_job("alice"), 3)
    with pytest.raises(RuleViolation) as refused:
        await queue.submit(make_job("alice"), 3)
    assert refused.value.rule == "max_queued_per_agent" and "max_queued_per_agent" in str(refused.value)
    await queue.submit(make_job("bob"), 3)  # others are not affected


async def test_result_recorded_once_and_stale_attempts_refused(queue: JobQueue) -> None:
    job = await queue.submit(make_job("alice"), 10)
    first = await queue.take("cpu", "w/1", "local", 1, max_running=5)
    assert first is not None
    await asyncio.sleep(0.05)
    actions = await queue.reclaim("cpu", min_idle_ms=10)
    assert [a.action for a in actions] == ["requeued"]
    second = await queue.take("cpu", "w/2", "local", 1, max_running=5)
    assert second is not None and second.job.id == job.id and second.attempt == 2
    ok, _ = await queue.heartbeat(job.id, "w/1", first.attempt)
    assert not ok, "the dead worker's attempt is no longer live"
    assert await queue.finish(job.id, "w/1", first.attempt, JobState.failed) == (False, "running")
    assert await queue.finish(job.id, "w/2", 2, JobState.succeeded, verdict="pass") == (True, "succeeded")
    assert await queue.finish(job.id, "w/2", 2, JobState.failed) == (False, "succeeded")
    stored = await queue.get(job.id)
    assert stored is not None and stored.state == "succeeded" and stored.attempts == 2
    assert "attempt 1 lost" in await queue.logs(job.id)
    depth = await queue.depth("cpu")
    assert depth["queued"] == 0 and depth["running"] == 0
    assert not await queue.redis.keys("ks:jobs:lane:*"), "finished lanes are removed"


async def test_heartbeat_keeps_a_long_job(queue: JobQueue) -> None:
    job = await queue.submit(make_job("alice"), 10)
    taken = await queue.take("cpu", "w/1", "local", 1, max_running=5)
    assert taken is not None
    for _ in range(4):
        await asyncio.sleep(0.06)
        assert await queue.heartbeat(job.id, "w/1", taken.attempt) == (True, False)
        assert await queue.reclaim("cpu", min_idle_ms=100) == []


async def test_poison_job_is_dead_lettered_with_its_reason(queue: JobQueue) -> None:
    poison = await queue.submit(make_job("alice", max_attempts=2), 10)
    for attempt in (1, 2):  # each worker that takes it dies (never heartbeats or finishes)
        taken = await queue.take("cpu", f"w/{attempt}", "local", 1, max_running=5)
        assert taken is not None and taken.job.id == poison.id and taken.attempt == attempt
        await asyncio.sleep(0.05)
        await queue.reclaim("cpu", min_idle_ms=10)
    job = await queue.get(poison.id)
    assert job is not None and job.state == "error" and job.finished
    assert "dead-lettered after 2 attempts" in (job.error or "")
    dead = await queue.dead_letters("cpu")
    assert [d["job"] for d in dead] == [poison.id] and "w/2" in dead[0]["reason"]
    assert await queue.take("cpu", "w/3", "local", 1, max_running=5) is None
    assert (await queue.depth("cpu"))["dead_letters"] == 1


async def test_cancel_queued_and_running(queue: JobQueue) -> None:
    running = await queue.submit(make_job("alice"), 10)
    waiting = await queue.submit(make_job("alice"), 10)
    taken = await queue.take("cpu", "w/1", "local", 1, max_running=5)
    assert taken is not None and taken.job.id == running.id
    assert await queue.cancel(waiting.id) == "cancelled"
    assert await queue.cancel(running.id) == "cancelling"
    assert await queue.heartbeat(running.id, "w/1", 1) == (True, True)
    assert await queue.finish(running.id, "w/1", 1, JobState.cancelled) == (True, "cancelled")
    assert await queue.cancel(running.id) == "final"
    assert await queue.take("cpu", "w/1", "local", 1, max_running=5) is None
    assert (await queue.get(waiting.id)).state == "cancelled"  # type: ignore[union-attr]


async def test_node_lease_keeps_one_worker_per_node(queue: JobQueue) -> None:
    assert await queue.lease_node("npu", "n0", "w1/a", 200) is None
    assert await queue.lease_node("npu", "n0", "w2/b", 200) == "w1/a"
    assert await queue.lease_node("npu", "n1", "w2/b", 200) is None
    await asyncio.sleep(0.3)
    assert await queue.lease_node("npu", "n0", "w2/b", 200) is None, "a dead worker's lease expires"


async def test_logs_cut_inside_a_character_still_read(queue: JobQueue) -> None:
    """The log cap and ``tail`` cut by bytes; a split UTF-8 character must not make the log unreadable."""
    job = await queue.submit(make_job("alice"), 10)
    await queue.redis.set(queue.key("logs", job.id), "héllo ünïcode ✓".encode()[:-1])
    assert (await queue.logs(job.id)).startswith("héllo ünïcode ")
    assert (await queue.logs(job.id, tail=3)).endswith("\ufffd")
