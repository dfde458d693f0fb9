"""A pool's ``executor``: one kind's options, chosen by ``kind`` (the short form, the mapping, the earlier
flat shape), validated by that kind's own model; and what a pool does follows the kind's capabilities,
never its name."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gateway.client.jobs.executors import DockerOptions, LocalOptions, SlurmOptions
from gateway.client.jobs.pools import NodeConfig, PoolConfig, load_pools

ALLOCATING = """
from typing import ClassVar
from gateway.client.jobs.executors import ExecutorOptions

class GridOptions(ExecutorOptions):
    kind: str = "grid_executor:GridExecutor"
    queue: str = "short"
    allocates_devices: ClassVar[bool] = True
    submits_with: ClassVar[str] = "qsub"

class GridExecutor:
    kind = "grid"
    options_model = GridOptions
"""


def test_the_short_form_and_the_mapping_are_the_same_options() -> None:
    short = PoolConfig.model_validate({"name": "s", "executor": "slurm"})
    mapping = PoolConfig.model_validate({"name": "s", "executor": {"kind": "slurm"}})
    assert short == mapping and short.executor == SlurmOptions() and short.executor == "slurm"
    assert PoolConfig(name="c").executor == LocalOptions()
    assert PoolConfig.model_validate({"name": "d", "kind": "docker"}).executor == DockerOptions()
    gpu = PoolConfig.model_validate({"name": "g", "executor": {"kind": "slurm", "partition": "gpu"}})
    assert gpu.executor == SlurmOptions(partition="gpu")


def test_each_kind_takes_its_own_options_and_refuses_others() -> None:
    docker = PoolConfig.model_validate({"name": "d", "executor": {"kind": "docker", "image": "img"}})
    assert docker.executor.exec_fields("cpu") == {"options": docker.executor, "image": "img"}
    slurm = PoolConfig.model_validate({"name": "s", "device": "npu", "executor": {"kind": "slurm"}})
    fields = slurm.executor.exec_fields("npu")
    assert fields["gres"] == "npu" and fields["partition"] is None
    for executor, wrong in (
        ({"kind": "local", "image": "img"}, "executor.image"),
        ({"kind": "docker", "partition": "p"}, "executor.partition"),
        ({"kind": "slurm", "partitio": "p"}, "executor.partitio"),
    ):
        with pytest.raises(ValueError, match=f"{wrong}\n  Extra inputs are not permitted"):
            PoolConfig.model_validate({"name": "x", "executor": executor})
    with pytest.raises(ValueError, match="unknown executor 'k8s': local, docker, slurm"):
        PoolConfig.model_validate({"name": "x", "executor": "k8s"})
    with pytest.raises(ValueError, match="a mapping with kind:"):
        PoolConfig.model_validate({"name": "x", "executor": {"image": "img"}})


def test_the_earlier_flat_shape_is_folded_in() -> None:
    """``executor: slurm`` with ``partition:`` beside it, as pools were written before: the same pool."""
    flat = PoolConfig.model_validate({"name": "g", "executor": "slurm", "partition": "gpu", "gres": "tpu"})
    assert flat.executor == SlurmOptions(partition="gpu", gres="tpu")
    assert PoolConfig.model_validate({"name": "d", "kind": "docker", "image": "i"}).executor == DockerOptions(
        image="i"
    )
    # An earlier dump wrote all three for every pool, at their defaults: they say nothing there.
    old_dump = {"name": "c", "executor": "local", "gres": None, "partition": None, "image": "kswarm/empty"}
    assert PoolConfig.model_validate(old_dump).executor == LocalOptions()
    with pytest.raises(
        ValueError, match=r"partition is not an option of the local executor \(its options: none"
    ):
        PoolConfig.model_validate({"name": "c", "partition": "gpu"})
    with pytest.raises(ValueError, match="image is given twice"):
        PoolConfig.model_validate({"name": "d", "executor": {"kind": "docker", "image": "a"}, "image": "b"})


def test_a_pool_reads_back_from_its_dump(tmp_path: Path) -> None:
    """What the gateway serves a worker (``/pools/{pool}/config``) and what swarm.json keeps."""
    pools = [
        PoolConfig(name="c"),
        PoolConfig.model_validate({"name": "d", "executor": {"kind": "docker", "image": "img"}}),
        PoolConfig.model_validate(
            {"name": "s", "device": "cuda", "executor": {"kind": "slurm", "gres": "a100"}}
        ),
    ]
    dumped = [p.model_dump(mode="json") for p in pools]
    assert [d["executor"] for d in dumped] == [
        {"kind": "local"},
        {"kind": "docker", "image": "img"},
        {"kind": "slurm", "partition": None, "gres": "a100"},
    ]
    assert [PoolConfig.model_validate(d) for d in dumped] == pools
    path = tmp_path / "pools.yaml"
    path.write_text(yaml.safe_dump({"pools": dumped}))
    assert load_pools(path) == pools


@pytest.fixture
def grid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An executor outside the tree whose scheduler allocates the devices."""
    (tmp_path / "grid_executor.py").write_text(ALLOCATING)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "grid_executor:GridExecutor"
    sys.modules.pop("grid_executor", None)


def test_a_pool_follows_its_executors_capabilities_not_its_name(grid: str) -> None:
    """Slurm's rules (one worker, the whole pool, no node capacity) hold for any kind that allocates
    devices itself, and for no other."""
    for executor, node in (("slurm", "slurm"), (grid, grid)):
        pool = PoolConfig.model_validate({"name": "p", "executor": executor})
        assert pool.worker_nodes() == [None] and pool.served_node(None) == node
        assert [n.name for n in pool.nodes] == ["local"], "one default node, whatever the workers"
    with pytest.raises(
        ValueError,
        match=r"a grid_executor:GridExecutor pool has one worker \(it submits every job with qsub\)",
    ):
        PoolConfig.model_validate({"name": "p", "executor": grid, "workers": 2})
    queue = PoolConfig.model_validate({"name": "p", "executor": {"kind": grid, "queue": "long"}})
    assert queue.executor.queue == "long"  # type: ignore[attr-defined]
    nodes = [NodeConfig(name="a", devices=[0]), NodeConfig(name="b", devices=[0])]
    docker = PoolConfig(name="d", executor="docker", workers=2, nodes=nodes)
    assert docker.worker_nodes() == ["a", "b"] and docker.served_node(None) == "a"
    assert docker.served_node("b") == "b"


def test_the_schema_offers_each_kind_and_the_short_form() -> None:
    schema = PoolConfig.model_json_schema(mode="validation")
    choices = schema["properties"]["executor"]["anyOf"]
    assert {"enum": ["local", "docker", "slurm"], "type": "string"} in choices
    union = next(c for c in choices if "discriminator" in c)
    assert set(union["discriminator"]["mapping"]) == {"local", "docker", "slurm"}
    assert schema["$defs"]["SlurmOptions"]["additionalProperties"] is False


def test_the_pools_in_the_docs_are_valid(tmp_path: Path) -> None:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "jobs.md").read_text()
    section = doc.split("## Pools and rules", 1)[1].split("\n## ", 1)[0]
    (text,) = re.findall(r"```yaml\n(.*?)```", section, re.S)
    path = tmp_path / "pools.yaml"
    path.write_text(text)
    npu, gpu = load_pools(path)
    assert npu.executor == DockerOptions() and gpu.executor == SlurmOptions(partition="gpu")
