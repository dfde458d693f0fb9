"""The worker's task cache stores a task's regression cases beside task.py (issue 27): read-only, each
checked against its blob sha, under a key that a new case changes; the job's source names the cases.
The gateway's answer is a fake here (the definition route's own test reads a real main)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.client.jobs.models import Job
from gateway.client.jobs.pools import PoolConfig
from gateway.tasks.models import RegressionFile, definition_key
from kswarm_contracts.counterexample import CounterexampleInput, RegressionCase
from orchestrator.worker.tasks import TaskCache, TaskUnavailable, blob_sha

TASK_PY = b"# the task\nSHAPES = []\n"


def case(n: int) -> tuple[str, bytes]:
    cid = f"cx{n:012x}"
    body = RegressionCase(
        id=cid, task="add", input=CounterexampleInput(case={"n": 1000 + n}, dtype="float32"),
        finder="mallory", kernel="kernels/add/alice.py", sha="a" * 40, job="j0123456789ab",
    )  # fmt: skip
    return cid, body.model_dump_json().encode()


class FakeGateway:
    """Answers the definition route as the gateway does; counts the calls that carry content."""

    def __init__(self, cases: list[tuple[str, bytes]], bad: bool = False) -> None:
        self.cases = cases
        self.bad = bad
        self.with_content = 0

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        assert path == "/api/tasks/add/definition"
        content = params.get("content") != "false"
        self.with_content += content
        regressions = [
            {
                "id": cid, "path": f"tasks/add/regressions/{cid}.json",
                "blob_sha": blob_sha(data), "size": len(data),
                "content": (data + (b" " if self.bad else b"")).decode() if content else None,
            }
            for cid, data in self.cases
        ]  # fmt: skip
        regressions.append(
            {"id": "broken", "path": "tasks/add/regressions/broken.json", "blob_sha": "0" * 40, "size": 1,
             "content": "{" if content else None, "error": "broken.json: not a counterexample id"}
        )  # fmt: skip
        return {
            "task": "add", "source": "repo", "repo": "kswarm/dataset", "branch": "main", "commit": "c" * 40,
            "path": "tasks/add/task.py", "blob_sha": blob_sha(TASK_PY), "size": len(TASK_PY),
            "content": TASK_PY.decode() if content else None, "regressions": regressions,
        }  # fmt: skip


def job() -> Job:
    return Job(
        id="jtest", submitter="gate", repo="kswarm/dataset", ref="a" * 40, sha="a" * 40, task="add",
        kernel="kernels/add/alice.py", pool="cpu", devices=1, timeout_s=60, submitted=0.0,
    )  # fmt: skip


async def test_the_cache_stores_regressions_and_a_new_case_gives_a_fresh_dir(tmp_path: Path) -> None:
    cache, pool = TaskCache(tmp_path / "tasks"), PoolConfig(name="cpu")
    one = [case(1)]
    gateway = FakeGateway(one)
    task_dir, source = await cache.for_job(pool, job(), gateway)  # type: ignore[arg-type]
    cid, data = one[0]
    stored = task_dir / "regressions" / f"{cid}.json"
    assert (task_dir / "task.py").read_bytes() == TASK_PY and stored.read_bytes() == data
    assert sorted(p.name for p in (task_dir / "regressions").iterdir()) == [f"{cid}.json"], "no unusable file"
    assert not stored.stat().st_mode & 0o222 and not (task_dir / "regressions").stat().st_mode & 0o222
    assert source["regressions"] == [cid] and "broken.json" in source["regressions_skipped"][0]
    listed = [RegressionFile(id=cid, path="", blob_sha=blob_sha(data), size=0)]
    key = definition_key(blob_sha(TASK_PY), listed)
    assert task_dir == tmp_path / "tasks" / key / "add" and key != blob_sha(TASK_PY)
    assert gateway.with_content == 1

    again, _ = await cache.for_job(pool, job(), gateway)  # type: ignore[arg-type]
    assert again == task_dir and gateway.with_content == 1, "nothing changed: the cheap path, no content"

    gateway.cases = [*one, case(2)]  # a case merged on main: the next job gets a fresh dir with both
    fresh, source = await cache.for_job(pool, job(), gateway)  # type: ignore[arg-type]
    assert fresh != task_dir and gateway.with_content == 2
    assert source["regressions"] == [cid, case(2)[0]] and len(list((fresh / "regressions").iterdir())) == 2

    # a tampered case is not used: the dir is fetched again (and, being taken, refused)
    victim = fresh / "regressions" / f"{cid}.json"
    (fresh / "regressions").chmod(0o755)
    victim.chmod(0o644)
    victim.write_text('{"id": "cx000000000001"}')
    assert cache.cached(blob_sha(TASK_PY), "add", TaskCache.usable(await fake_meta(gateway))) is None
    (fresh / "regressions").chmod(0o555)


async def fake_meta(gateway: FakeGateway) -> Any:
    from gateway.tasks.models import TaskDefinition

    return TaskDefinition.model_validate(await gateway.get("/api/tasks/add/definition", content="false"))


async def test_a_case_that_does_not_hash_to_its_blob_is_refused(tmp_path: Path) -> None:
    tampered = FakeGateway([case(3)], bad=True)
    with pytest.raises(TaskUnavailable, match="does not hash to blob"):
        await TaskCache(tmp_path / "t").for_job(PoolConfig(name="cpu"), job(), tampered)  # type: ignore[arg-type]


async def test_without_cases_the_key_is_the_blob_as_before(tmp_path: Path) -> None:
    none = FakeGateway([])
    task_dir, source = await TaskCache(tmp_path / "t").for_job(PoolConfig(name="cpu"), job(), none)  # type: ignore[arg-type]
    assert task_dir == tmp_path / "t" / blob_sha(TASK_PY) / "add" and "regressions" not in source
    assert not (task_dir / "regressions").exists()


async def test_a_pool_with_tasks_dir_reads_the_cases_it_has(tmp_path: Path) -> None:
    local = tmp_path / "own" / "add"
    (local / "regressions").mkdir(parents=True)
    (local / "task.py").write_bytes(TASK_PY)
    cid, data = case(4)
    (local / "regressions" / f"{cid}.json").write_bytes(data)
    pool = PoolConfig(name="cpu", tasks_dir=local.parent)
    task_dir, source = await TaskCache(tmp_path / "t").for_job(pool, job(), None)  # type: ignore[arg-type]
    assert task_dir == local.resolve() and source["source"] == "pool" and source["regressions"] == [cid]
