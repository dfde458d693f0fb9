"""Allocation and admission without Redis: gang allocation (hypothesis), fair choice, pool rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.client.jobs.models import JobRequest
from gateway.client.jobs.pools import NodeConfig, PoolConfig, PoolRules, load_pools
from gateway.errors import RuleViolation
from gateway.jobs.admission import admit
from gateway.jobs.fairness import LaneHead, choose_lane, fair_order
from orchestrator.worker.allocator import DeviceAllocator

ops = st.lists(
    st.tuples(
        st.sampled_from(["alloc", "release"]), st.integers(0, 11), st.integers(0, 8), st.integers(0, 2)
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(ops=ops, sizes=st.lists(st.integers(1, 8), min_size=3, max_size=3))
def test_never_two_jobs_on_one_device(ops: list[tuple[str, int, int, int]], sizes: list[int]) -> None:
    nodes = [DeviceAllocator(f"n{i}", range(100 * i, 100 * i + size)) for i, size in enumerate(sizes)]
    held: dict[str, tuple[int, tuple[int, ...]]] = {}  # job -> (node index, devices)
    for op, job_no, count, node_no in ops:
        job, node = f"j{job_no}", nodes[node_no]
        if op == "alloc" and job not in held:
            if count > len(node.devices):
                continue
            got = node.allocate(job, count)
            if got is None:
                assert node.free_count() < count, "refused although enough devices were free"
                continue
            assert len(got.devices) == count and len(set(got.devices)) == count, "gang: all N or nothing"
            assert set(got.devices) <= set(node.devices), "all on the one node it asked"
            held[job] = (node_no, got.devices)
        elif op == "release" and job in held:
            nodes[held.pop(job)[0]].release(job)
        owners: dict[tuple[int, int], str] = {}
        for name, (n, devices) in held.items():
            for d in devices:
                assert (n, d) not in owners, f"device {d} of node {n} held by {owners[(n, d)]} and {name}"
                owners[(n, d)] = name
        for i, alloc in enumerate(nodes):
            mine = {d for (n, d) in owners if n == i}
            assert mine | set(alloc.free_ids()) == set(alloc.devices) and not mine & set(alloc.free_ids())


def head(lane: str, served: int, entry: str, devices: int = 1, running: int = 0, prio: int = 1) -> LaneHead:
    return LaneHead(lane, prio, lane.partition(":")[2], entry, f"job-{lane}", devices, running, served)


def test_fair_choice() -> None:
    heads = [head("1:alice", served=7, entry="5-0"), head("1:bob", served=0, entry="9-0")]
    assert choose_lane(heads, 1, 2).submitter == "bob", "never-served bob goes before alice"
    heads.append(head("0:carol", served=9, entry="10-0", prio=0))
    assert choose_lane(heads, 1, 2).submitter == "carol", "reproductions first"
    busy = [head("1:alice", served=1, entry="1-0", running=2), head("1:bob", served=5, entry="2-0")]
    assert choose_lane(busy, 1, 2).submitter == "bob", "alice is at her running limit"
    gang = [head("1:alice", served=0, entry="1-0", devices=8), head("1:bob", served=3, entry="2-0")]
    assert choose_lane(gang, 4, 2) is None, "the first in line waits for 8; nothing jumps ahead of it"
    assert choose_lane(gang, 4, 2, node_capacity=4).submitter == "bob", "a job this node can never hold"
    assert [h.submitter for h in fair_order(gang, 2)] == ["alice", "bob"]


NPU = PoolConfig(
    name="npu-910c",
    device="npu",
    nodes=[NodeConfig(name="n0", devices=list(range(8))), NodeConfig(name="n1", devices=list(range(8)))],
    rules=PoolRules(allowed_device_counts=[8], max_timeout_s=1800),
)


def request(**fields: object) -> JobRequest:
    return JobRequest(task="add", kernel="kernels/add/k.py", pool="npu-910c", **fields)  # type: ignore[arg-type]


def test_eight_card_rule_refuses_four_cards_naming_the_rule() -> None:
    with pytest.raises(RuleViolation) as refused:
        admit(NPU, request(devices=4))
    assert refused.value.rule == "allowed_device_counts"
    assert "allowed_device_counts" in str(refused.value) and "exactly 8" in str(refused.value)
    assert admit(NPU, request(devices=8)) == (8, 600)
    assert admit(NPU, request()) == (8, 600), "the default is the pool's rule"


@pytest.mark.parametrize(
    ("fields", "rule"),
    [
        ({"devices": 8, "nodes": 2}, "single_node"),
        ({"devices": 8, "timeout_s": 3600}, "max_timeout_s"),
    ],
)
def test_other_rules(fields: dict, rule: str) -> None:
    with pytest.raises(RuleViolation, match=rule):
        admit(NPU, request(**fields))


def test_cpu_pool_defaults_and_capacity() -> None:
    cpu = PoolConfig(name="cpu")
    assert cpu.rules.allowed_device_counts == [1] and cpu.rules.kinds == ["verify"]
    with pytest.raises(RuleViolation, match="kinds"):
        admit(cpu, JobRequest(task="add", kernel="kernels/add/k.py", kind="bench"))
    free = PoolConfig(name="gpu", device="cuda", nodes=[NodeConfig(name="g", devices=[0, 1, 2, 3])])
    with pytest.raises(RuleViolation, match="node_capacity"):
        admit(free, JobRequest(task="add", kernel="kernels/add/k.py", pool="gpu", devices=8))
    assert (
        free.visible_devices_var == "CUDA_VISIBLE_DEVICES"
        and NPU.visible_devices_var == "ASCEND_RT_VISIBLE_DEVICES"
    )


def test_bad_requests_are_refused_by_the_model() -> None:
    for kernel in ("../x.py", "/etc/x.py", "a/./b.py", "k.txt"):
        with pytest.raises(ValueError):
            JobRequest(task="add", kernel=kernel)
    with pytest.raises(ValueError):
        JobRequest(task="add", kernel="kernels/add/k.py", submitter="bob")  # type: ignore[call-arg]


def test_pools_from_a_swarm_yaml(tmp_path) -> None:
    """A swarm.yaml's pools are PoolConfig as they are (the spec embeds the model): no short shape."""
    spec = tmp_path / "swarm.yaml"
    spec.write_text(
        "swarm: s\npools:\n  - name: cpu\n    workers: 2\n  - name: npu-910c\n    executor: local\n"
        "    device: npu\n    workers: 2\n    nodes:\n      - {name: n0, devices: [0, 1, 2, 3, 4, 5, 6, 7]}\n"
        "      - {name: n1, devices: [0, 1, 2, 3, 4, 5, 6, 7]}\n    rules: {allowed_device_counts: [8]}\n"
    )
    cpu, npu = load_pools(spec)
    assert cpu.name == "cpu" and cpu.device == "cpu"
    assert [n.name for n in cpu.nodes] == ["local", "local-2"], "a node per worker by default"
    assert cpu.worker_nodes() == ["local", "local-2"]
    assert [n.devices for n in npu.nodes] == [list(range(8))] * 2
    assert npu.rules.allowed_device_counts == [8]
    short = tmp_path / "short.yaml"
    short.write_text("pools:\n  - name: npu\n    cards_per_node: 8\n")
    with pytest.raises(ValueError, match="cards_per_node"):
        load_pools(short)


def test_workers_need_nodes_and_slurm_has_one() -> None:
    with pytest.raises(ValueError, match="workers: 3 needs 3 nodes"):
        PoolConfig(
            name="gpu",
            workers=3,
            nodes=[NodeConfig(name="g0", devices=[0]), NodeConfig(name="g1", devices=[0])],
        )
    with pytest.raises(ValueError, match="a slurm pool has one worker"):
        PoolConfig(name="s", executor="slurm", workers=2)
    assert PoolConfig(name="s", executor="slurm").worker_nodes() == [None]
    assert PoolConfig(name="c", workers=0).worker_nodes() == []
    assert PoolConfig.model_validate({"name": "d", "kind": "docker"}).executor == "docker"
