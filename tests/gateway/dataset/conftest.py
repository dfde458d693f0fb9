"""Fixtures of the dataset suites: one real gateway per module (forge with its gate, board, jobs) with the
dataset repo seeded from the catalogue and protected like production (1 approval + the cpu check)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_sync
from datasetkit import DatasetGateway

AGENTS = ("alice", "bob", "carol")


@pytest.fixture(scope="module")
def dataset_gw(redis_url: str) -> Iterator[DatasetGateway]:
    client = redis_sync.Redis.from_url(redis_url)
    client.flushall()
    client.close()
    tmp = Path(tempfile.mkdtemp(prefix="ksds"))
    gw = DatasetGateway(tmp / "home", redis_url)
    gw.start()
    gw.tokens = {n: gw.add_principal(n) for n in AGENTS}
    gw.tokens["worker1"] = gw.add_principal("worker1", "worker")
    with gw.op() as op:
        seeded = op.post("/api/tasks/seed", json={"post_tasks": False})
        assert seeded.status_code == 200 and seeded.json()["seeded"], seeded.text
        policy = {"required_approvals": 1, "required_checks": ["kswarm/verify:cpu"]}
        assert op.put("/api/forge/repos/kswarm/dataset/policy", json=policy).status_code == 200
    try:
        yield gw
    finally:
        gw.stop()
        shutil.rmtree(tmp, ignore_errors=True)
