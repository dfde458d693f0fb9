"""The dataset's splits (issue 27, points 4-6) over a real history: alice's add is merged and later
withdrawn by a confirmed counterexample (the withdrawal read from the gateway's route), carol's softmax is
merged and stays, carol's relu is a caught hack and alice's relu is wrong; the red team's and the heal's
jobs are neither. The build must mark the withdrawn row and keep it out of the accepted split, write the
rejected split with source, flags, failing cases, family and the author's timeline (bounded; none when the
swarm opts out), load with pyarrow and ``datasets``, and print the per-task numbers on the card."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import redis as redis_sync
from datasetkit import DatasetGateway, Lab, harness_result
from forgekit import Swarm

from gateway.client import GatewayTarget
from gateway.dataset.build import BuildReport, build_dataset_at
from gateway.dataset.families import FLAG_FAMILY, family_of
from gateway.dataset.loop_sources import (
    CounterexampleRecord,
    StaticCounterexampleSource,
    StaticTimelineSource,
)
from gateway.dataset.rules import DatasetRules
from gateway.dataset.sources import CostWindow
from gateway.dataset.withdrawals import KEY_PREFIX, Withdrawal, withdrawal_key
from gateway.tasks.catalogue import solution_path, wrong_solution_path
from kswarm_contracts.verification import ADVISORY_FLAGS, Flag

REPO = "kswarm/dataset"
HACK = "import torch\n\ndef relu(x):\n    return torch.relu(x)  # no Triton at all\n"


class FixedCost:
    """Each record's window costs 1 cent; the ledger as given (task, agent, usd)."""

    def __init__(self, lines: list[tuple[str, str, float]]) -> None:
        self.lines = lines

    def window(self, task: str, agent: str, since: float, until: float) -> CostWindow | None:
        return CostWindow(tokens=100, cost_usd=0.01)

    def report(self) -> dict[str, Any] | None:
        return {
            "lines": [
                {"task": t, "agent": a, "model": "scripted", "tokens": 100, "cost_usd": usd}
                for t, a, usd in self.lines
            ]
        }


def hack_result(task: str, kernel: str) -> dict[str, Any]:
    """A caught hack: the trials flagged torch_compute, the second one a regression case of the task."""
    result = harness_result(task, kernel, passed=False)
    result["flags"] = ["torch_compute", "mismatch"]
    for trial in result["trials"]:
        trial.update(ok=False, flags=["torch_compute"], detail="aten::relu issued by the candidate")
    result["trials"][1]["regression"] = "cx0123456789ab"
    return result


@pytest.fixture(scope="module")
def history(dataset_gw: DatasetGateway, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    swarm = Swarm(dataset_gw, tmp_path_factory.mktemp("splits"), "kswarm", "dataset", dataset_gw.tokens)
    lab, work = Lab(dataset_gw, swarm), {}
    add, sm, relu_c, relu_a = (
        "kernels/add/alice_add.py",
        "kernels/softmax/carol_rows.py",
        "kernels/relu/carol_relu.py",
        "kernels/relu/alice_relu.py",
    )
    add_sha = lab.push("alice", "alice/add", add, solution_path("add").read_text(), work)
    j_add = lab.verify("alice", "add", add, "alice/add", True)
    pr_add = swarm.open_pr("alice", "alice/add", reviewers=("bob",))
    assert swarm.review("bob", pr_add, "APPROVED").status_code == 200
    swarm.wait_merged(pr_add)

    lab.push("carol", "carol/softmax", sm, solution_path("softmax").read_text(), work)
    j_sm = lab.verify("carol", "softmax", sm, "carol/softmax", True)
    pr_sm = swarm.open_pr("carol", "carol/softmax", reviewers=("bob",))
    assert swarm.review("bob", pr_sm, "APPROVED").status_code == 200
    swarm.wait_merged(pr_sm)

    now = time.time()
    carol_timeline = [
        {"kind": "wake", "ts": now - 3, "summary": "woken by 1: task relu", "data": {"count": 1}},
        {"kind": "model", "ts": now - 2, "summary": "scripted: 10 tokens", "data": {"model": "scripted"}},
        {"kind": "tool_call", "ts": now - 1, "summary": "bash", "data": {"input": {"command": "git push"}}},
        {"kind": "tool_result", "ts": now - 0.5, "summary": "ok", "data": {"content": "a DM quoted"}},
        {"kind": "model", "ts": now + 3600, "summary": "after the submission", "data": {}},
    ]
    lab.push("carol", "carol/relu", relu_c, HACK, work)
    j_hack = lab.verify("carol", "relu", relu_c, "carol/relu", False, result=hack_result("relu", relu_c))
    lab.push("alice", "alice/relu", relu_a, wrong_solution_path("softmax").read_text(), work)
    j_wrong = lab.verify("alice", "relu", relu_a, "alice/relu", False)
    # The red team's confirming job and the heal's re-verification, both failing alice's merged add.
    j_confirm = lab.verify("bob", "add", add, "main", False)
    j_heal = lab.verify("bob", "add", add, "main", False)

    withdrawal = Withdrawal(
        repo=REPO, task="add", kernel=add, sha=add_sha, reason="fails regression case cx0123456789ab",
        counterexample="cx0123456789ab", job=j_heal, author="alice", at=time.time(),
    )  # fmt: skip
    client = redis_sync.Redis.from_url(dataset_gw.redis_url)
    client.hset(KEY_PREFIX + REPO, withdrawal_key(add, add_sha), withdrawal.model_dump_json())
    client.close()
    cx = [
        CounterexampleRecord(
            id="cx0123456789ab", finder="red-1", task="add", repo=REPO, kernel=add, sha=add_sha,
            status="confirmed", job=j_confirm,
        ),
        CounterexampleRecord(
            id="cx00000000000a", finder="red-1", task="add", repo=REPO, kernel=add, sha=add_sha,
            status="refused", reasons=["outside the domain: n > 2**24"],
        ),
        CounterexampleRecord(
            id="cx00000000000b", finder="red-1", task="softmax", repo=REPO, kernel=sm, sha=add_sha,
            status="refused",
        ),
    ]  # fmt: skip
    return {
        "jobs": {
            "add": j_add,
            "sm": j_sm,
            "hack": j_hack,
            "wrong": j_wrong,
            "confirm": j_confirm,
            "heal": j_heal,
        },
        "add_sha": add_sha,
        "counterexamples": cx,
        "timeline": {"carol": carol_timeline},
    }


Build = Callable[..., BuildReport]


@pytest.fixture
def build(dataset_gw: DatasetGateway, history: dict[str, Any], tmp_path: Path) -> Build:
    def run(rules: DatasetRules | None = None, timelines: Any = None, out: str = "ds") -> BuildReport:
        target = GatewayTarget(token=dataset_gw.operator_token, url=dataset_gw.url, timeout=60)
        cost = FixedCost(
            [("add", "alice", 0.02), ("softmax", "carol", 0.03), ("relu", "carol", 0.01),
             ("relu", "alice", 0.01), ("-", "red-1", 0.04), ("-", "bob", 0.05)]
        )  # fmt: skip
        return build_dataset_at(
            target,
            REPO,
            tmp_path / out,
            models={"alice": "scripted", "carol": "claude-x", "bob": "scripted"},
            mirror_dir=tmp_path / "m.git",
            cost_source=cost,
            counterexample_source=StaticCounterexampleSource(history["counterexamples"]),
            timeline_source=timelines or StaticTimelineSource(history["timeline"]),
            rules=rules,
            roles={"red-1": "red-team", "alice": "developer"},
        )

    return run


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_withdrawn_kernel_leaves_the_accepted_split_and_keeps_its_record(
    build: Build, history: dict[str, Any]
) -> None:
    report = build()
    jobs = history["jobs"]
    rows = {r["record_id"]: r for r in report.rows}
    assert set(rows) == set(jobs.values()), "every attempt stays in the records"
    add = rows[jobs["add"]]
    assert (add["status"], add["accepted"], add["pr_state"]) == ("withdrawn", False, "merged")
    assert add["withdrawal"] == {
        "reason": "fails regression case cx0123456789ab",
        "counterexample": "cx0123456789ab",
        "finder": "red-1",
        "job": jobs["heal"],
        "at": pytest.approx(add["withdrawal"]["at"]),
    }
    assert rows[jobs["sm"]]["status"] == "accepted" and rows[jobs["sm"]]["accepted"]
    # The red team's and the heal's jobs failed alice's kernel: evidence, not rejected attempts.
    assert rows[jobs["confirm"]]["status"] == "other" and rows[jobs["heal"]]["status"] == "other"
    assert [r["record_id"] for r in jsonl(report.paths.accepted_jsonl)] == [jobs["sm"]]
    assert len(jsonl(report.paths.jsonl)) == 6
    assert report.summary["accepted"] == 1 and report.summary["statuses"] == {
        "accepted": 1, "other": 2, "rejected": 2, "withdrawn": 1,
    }  # fmt: skip


def test_the_rejected_split_holds_source_flags_failing_cases_family_and_timeline(
    build: Build, history: dict[str, Any]
) -> None:
    report = build()
    jobs = history["jobs"]
    rejected = {r["record_id"]: r for r in jsonl(report.paths.rejected_jsonl)}
    assert set(rejected) == {jobs["hack"], jobs["wrong"]}
    hack = rejected[jobs["hack"]]
    assert (hack["status"], hack["family"], hack["author"], hack["author_model"]) == (
        "rejected", "reward_hack", "carol", "claude-x",
    )  # fmt: skip
    assert hack["kernel_code"] == HACK and hack["flags"] == ["torch_compute", "mismatch"]
    assert hack["cost_usd"] == 0.01 and hack["verdict"] == "fail"
    assert len(hack["failing_cases"]) == 3
    case = hack["failing_cases"][1]
    assert (json.loads(case["case"]), case["dtype"], case["flags"], case["regression"]) == (
        {"n": 1000}, "float32", ["torch_compute"], "cx0123456789ab",
    )  # fmt: skip
    assert case["error"] == "aten::relu issued by the candidate"
    # The wakes, model and tool calls before the submission: no tool output, nothing after it.
    assert [e["kind"] for e in hack["timeline"]] == ["wake", "model", "tool_call"]
    assert json.loads(hack["timeline"][2]["data"]) == {"input": {"command": "git push"}}
    assert hack["timeline_truncated"] is False

    wrong = rejected[jobs["wrong"]]
    assert (wrong["family"], wrong["author"]) == ("wrong", "alice")
    assert [json.loads(c["case"]) for c in wrong["failing_cases"]] == [{"n": 1000}, {"n": 37}]
    assert wrong["failing_cases"][0]["flags"] == ["mismatch"] and wrong["timeline"] == []
    assert all(r["timeline"] is None for r in report.rows if r["status"] != "rejected")


def test_the_splits_load_with_pyarrow_and_hf_datasets(
    build: Build, history: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = build()
    table = pq.read_table(report.paths.rejected_parquet)
    assert table.num_rows == 2 and "failing_cases" in table.column_names
    assert sorted(table.column("family").to_pylist()) == ["reward_hack", "wrong"]
    assert pq.read_table(report.paths.accepted_parquet).num_rows == 1
    assert pq.read_table(report.paths.parquet).num_rows == 6

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    import datasets

    ds = datasets.load_dataset(str(report.paths.card.parent), cache_dir=str(tmp_path / "hf"))
    assert {name: ds[name].num_rows for name in ds} == {"train": 6, "accepted": 1, "rejected": 2}
    hacks = ds["rejected"].filter(lambda r: r["family"] == "reward_hack")
    assert hacks["record_id"] == [history["jobs"]["hack"]]
    assert hacks[0]["failing_cases"][1]["regression"] == "cx0123456789ab"
    assert ds["accepted"]["record_id"] == [history["jobs"]["sm"]]


def test_the_card_reports_the_numbers_per_task(build: Build, history: dict[str, Any]) -> None:
    report = build()
    loop = report.summary["loop"]
    assert loop["by_task"]["add"] | {"cost_usd": None} == {
        "accepted": 0, "withdrawn": 1, "rejected": 0, "rejected_by_family": {},
        "counterexamples": {"confirmed": 1, "refused": 1, "pending": 0, "error": 0},
        "cost_usd": None, "rejected_usd": 0.0, "red_team_usd": 0.026667, "usd_per_accepted_kernel": None,
    }  # fmt: skip
    assert loop["by_task"]["add"]["cost_usd"] == pytest.approx(0.046667)  # 0.02 + 2/3 of red-1's 0.04
    relu = loop["by_task"]["relu"]
    assert (relu["rejected"], relu["rejected_by_family"]) == (2, {"reward_hack": 1, "wrong": 1})
    assert relu["rejected_usd"] == 0.02 and relu["cost_usd"] == 0.02
    softmax = loop["by_task"]["softmax"]
    assert softmax["usd_per_accepted_kernel"] == pytest.approx(0.043333)
    overall = loop["overall"]
    # Everything on tasks (0.07) and the red team's hunting (0.04); bob's idle spend is nobody's kernel.
    assert (overall["accepted"], overall["withdrawn"], overall["rejected"]) == (1, 1, 2)
    assert overall["cost_usd"] == pytest.approx(0.11) and overall["red_team_usd"] == pytest.approx(0.04)
    assert overall["usd_per_accepted_kernel"] == pytest.approx(0.11)
    assert overall["counterexamples"] == {"confirmed": 1, "refused": 2, "pending": 0, "error": 0}
    assert [(c["counterexample"], c["finder"], c["withdrew"]) for c in loop["regression_cases"]] == [
        ("cx0123456789ab", "red-1", 1)
    ]

    card = report.paths.card.read_text()
    assert "  - split: rejected\n    path: data/rejected.parquet" in card
    assert "| relu | 0 | 0 | 2 | `reward_hack` 1, `wrong` 1 | 0 / 0 | $0.0200 | – |" in card
    assert "| add | 0 | 1 | 0 | – | 1 / 1 | $0.0467 | – |" in card
    assert "| softmax | 1 | 0 | 0 | – | 0 / 1 | $0.0433 | $0.0433 |" in card
    assert "| **all** | 1 | 1 | 2 | `reward_hack` 1, `wrong` 1 | 1 / 2 | $0.1100 | $0.1100 |" in card
    assert "| `cx0123456789ab` | add | red-1 | 1 | `kernels/add/alice_add.py`@" in card
    assert "**$0.1100 per accepted kernel**" in card


def test_the_timeline_excerpt_is_bounded_and_absent_when_the_swarm_opts_out(
    build: Build, history: dict[str, Any]
) -> None:
    start = time.time() - 3000
    chatty = {
        "carol": [
            {"kind": "tool_call", "ts": start + i, "summary": f"call {i}", "data": {"input": "x" * 200}}
            for i in range(40)
        ]
    }
    report = build(DatasetRules(timeline_excerpt_bytes=1024), StaticTimelineSource(chatty), out="small")
    hack = next(r for r in report.rows if r["record_id"] == history["jobs"]["hack"])
    assert hack["timeline_truncated"] is True and hack["timeline"]
    assert len(json.dumps(hack["timeline"]).encode()) <= 1024
    assert hack["timeline"][-1]["summary"] == "call 39", "the newest entries before the submission are kept"

    class Refuses:
        def entries(self, agent: str, since: float, until: float) -> list[dict[str, Any]] | None:
            raise AssertionError("an opted-out swarm's timelines are never read")

    report = build(DatasetRules(rejected_timelines=False), Refuses(), out="optout")
    assert all(r["timeline"] is None for r in report.rows)
    assert all(r["timeline"] is None for r in jsonl(report.paths.rejected_jsonl))


def test_every_flag_has_a_family() -> None:
    assert set(FLAG_FAMILY) == set(Flag) - ADVISORY_FLAGS
    assert family_of("fail", ["mismatch", "host_compute"]) == "reward_hack"
    assert family_of("error", ["crash", "timeout"]) == "crash"
    assert family_of("fail", [], static_violations=2) == "static"
    assert family_of("unverifiable", []) == "unverifiable"
    assert family_of("fail", ["suspicious_speedup"]) == "other"


def test_the_red_teams_and_the_heals_jobs_are_never_an_acceptance_of_their_own() -> None:
    """A refused counterexample's job passes on a merged head (the kernel is right on that input), and a
    heal's re-verification passes too: neither may add an accepted row beside the kernel's own."""
    from gateway.dataset.sources import JobRecord
    from gateway.dataset.splits import classify

    def job(jid: str, **extra: Any) -> JobRecord:
        base = {"id": jid, "submitter": "x", "repo": "o/d", "sha": "a" * 40, "task": "softmax"}
        return JobRecord(**base, kernel="kernels/softmax/k.py", pool="cpu", state="succeeded", **extra)

    jobs = {
        "j1": job("j1"),
        "j2": job("j2", kind="counterexample"),
        "j3": job("j3", reverify="cx0123456789ab"),
    }
    rows = [
        {"record_id": j, "accepted": True, "verdict": "pass", "flags": [],
         "kernel_path": "kernels/softmax/k.py", "commit": "a" * 40, "merge_commit": None}
        for j in jobs
    ]  # fmt: skip
    classify(rows, jobs, [], [])
    assert [(r["record_id"], r["accepted"], r["status"]) for r in rows] == [
        ("j1", True, "accepted"),
        ("j2", False, "other"),
        ("j3", False, "other"),
    ]
