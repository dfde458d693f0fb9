"""``kswarm dataset build`` over a small real history: agents push kernels, a worker records verification
jobs, a reviewer requests changes and approves, the gate merges; the dataset must say who wrote what,
who reviewed it, which attempts were accepted, and load with Hugging Face ``datasets``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from datasetkit import DatasetGateway, Lab
from forgekit import Swarm
from typer.testing import CliRunner

from gateway.dataset.build import build_dataset
from gateway.dataset.schema import COLUMNS
from gateway.tasks.catalogue import solution_path, wrong_solution_path
from orchestrator.cli.main import app


def code(name: str, wrong: bool = False) -> str:
    return (wrong_solution_path(name) if wrong else solution_path(name)).read_text()


@pytest.fixture(scope="module")
def history(dataset_gw: DatasetGateway, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """alice's add merges; carol's softmax fails, gets a change request, is fixed, reproduced by bob and
    merges; alice's relu passes but nobody reviews it."""
    swarm = Swarm(dataset_gw, tmp_path_factory.mktemp("hist"), "kswarm", "dataset", dataset_gw.tokens)
    lab, work = Lab(dataset_gw, swarm), {}
    add_path, sm_path, relu_path = (
        "kernels/add/alice_add.py",
        "kernels/softmax/carol_rows.py",
        "kernels/relu/alice_relu.py",
    )
    lab.push("alice", "alice/add", add_path, code("add"), work)
    j_add = lab.verify("alice", "add", add_path, "alice/add", True)
    pr_add = swarm.open_pr("alice", "alice/add", reviewers=("bob",))
    assert swarm.review("bob", pr_add, "APPROVED").status_code == 200
    swarm.wait_merged(pr_add)

    wrong_sha = lab.push("carol", "carol/softmax", sm_path, code("softmax", wrong=True), work)
    j_wrong = lab.verify("carol", "softmax", sm_path, "carol/softmax", False)
    pr_sm = swarm.open_pr("carol", "carol/softmax", reviewers=("bob",))
    assert swarm.review("bob", pr_sm, "REQUEST_CHANGES", "padding lanes load 0.0").status_code == 200
    fix_sha = lab.push("carol", "carol/softmax", sm_path, code("softmax"), work)
    j_fix = lab.verify("carol", "softmax", sm_path, "carol/softmax", True)
    j_repro = lab.verify("bob", "softmax", sm_path, fix_sha, True, reproduce=pr_sm)
    assert swarm.review("bob", pr_sm, "APPROVED").status_code == 200
    merged = swarm.wait_merged(pr_sm)

    lab.push("alice", "alice/relu", relu_path, code("relu"), work)
    j_relu = lab.verify("alice", "relu", relu_path, "alice/relu", True)
    swarm.open_pr("alice", "alice/relu", reviewers=("carol",))
    return {
        "jobs": {"add": j_add, "wrong": j_wrong, "fix": j_fix, "repro": j_repro, "relu": j_relu},
        "wrong_sha": wrong_sha,
        "fix_sha": fix_sha,
        "merge": merged["merge_commit_sha"],
        "prs": {"add": pr_add, "softmax": pr_sm},
    }


def test_dataset_rows_authors_reviewers_acceptance_lineage(
    dataset_gw: DatasetGateway, history: dict, tmp_path: Path
) -> None:
    models = {"alice": "scripted", "bob": "scripted", "carol": "claude-x"}
    url, token, mirror = dataset_gw.url, dataset_gw.operator_token, tmp_path / "m.git"
    first = build_dataset(url, token, "kswarm/dataset", tmp_path / "ds1", models, mirror_dir=mirror)
    report = build_dataset(url, token, "kswarm/dataset", tmp_path / "ds", models, mirror_dir=mirror)
    assert [r["record_id"] for r in first.rows] == [r["record_id"] for r in report.rows], "mirror re-fetched"
    jobs = history["jobs"]
    rows = {r["record_id"]: r for r in report.rows}
    assert set(rows) == set(jobs.values()), "one row per verification attempt"

    add = rows[jobs["add"]]
    assert add["accepted"] and add["on_main"] and add["pr_state"] == "merged"
    assert (add["author"], add["author_model"], add["reviewers"], add["approvers"]) == (
        "alice", "scripted", ["bob"], ["bob"],
    )  # fmt: skip
    assert add["kernel_code"] == code("add")
    assert add["kernel_sha256"] == hashlib.sha256(code("add").encode()).hexdigest()

    wrong = rows[jobs["wrong"]]
    assert not wrong["accepted"] and not wrong["on_main"] and wrong["verdict"] == "fail"
    assert wrong["flags"] == ["mismatch"] and wrong["n_trials_passed"] == 1 and wrong["n_trials"] == 3
    assert wrong["commit"] == history["wrong_sha"] and wrong["pr_number"] == history["prs"]["softmax"]
    assert wrong["reviewers"] == ["bob"] and wrong["approvers"] == [] and wrong["refines"] is None
    assert {
        "user": "bob",
        "state": "REQUEST_CHANGES",
        "commit_id": history["wrong_sha"],
        "on_head": True,
    } in (wrong["reviews"])

    fix = rows[jobs["fix"]]
    assert fix["accepted"] and fix["on_main"] and fix["merge_commit"] == history["merge"]
    assert (fix["author"], fix["submitter"], fix["reviewers"]) == ("carol", "carol", ["bob"])
    assert (fix["refines"], fix["refines_commit"]) == (jobs["wrong"], history["wrong_sha"]), "lineage"

    repro = rows[jobs["repro"]]
    assert repro["reproduction"] and repro["submitter"] == "bob" and repro["author"] == "carol"
    assert repro["accepted"] and repro["commit"] == history["fix_sha"]

    relu = rows[jobs["relu"]]
    assert relu["passed"] and not relu["accepted"] and relu["pr_state"] == "open" and relu["reviewers"] == []

    for row in report.rows:
        if row["accepted"]:
            assert row["author"] not in row["reviewers"] and row["reviewers"], row["record_id"]
        assert row["pool"] == "cpu" and row["device"] == "cpu" and row["environment"]["triton"] == "3.9.0"
    assert report.summary["records"] == 5 and report.summary["accepted"] == 3
    # Each record carries the gateway's level; the accepted kernels (add; softmax, twice verified) too.
    assert {r["record_id"]: r["evidence"] for r in report.rows} == {
        jobs["add"]: "cpu-screened",
        jobs["wrong"]: "none",
        jobs["fix"]: "cpu-screened",
        jobs["repro"]: "cpu-screened",
        jobs["relu"]: "cpu-screened",
    }
    evidence = report.summary["evidence"]
    assert evidence["accepted"] == {"cpu-screened": 2}
    assert [(k["kernel_path"], k["evidence"]) for k in evidence["kernels"]] == [
        ("kernels/add/alice_add.py", "cpu-screened"),
        ("kernels/softmax/carol_rows.py", "cpu-screened"),
    ]
    assert report.summary["pools"]["cpu"]["pass_rate"] == 0.8


def test_dataset_files_load_with_hf_datasets(
    dataset_gw: DatasetGateway, history: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "ds"
    env = {"KSWARM_URL": dataset_gw.url, "KSWARM_TOKEN": dataset_gw.operator_token}
    result = CliRunner().invoke(
        app,
        [
            "dataset",
            "build",
            "--repo",
            "kswarm/dataset",
            "--out",
            str(out),
            "--home",
            str(tmp_path / "h"),
            "--json",
        ],
        env=env,
    )
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    assert printed["records"] == 5 and printed["accepted"] == 3

    lines = (out / "data" / "records.jsonl").read_text().splitlines()
    assert len(lines) == 5
    card = (out / "README.md").read_text()
    assert (
        "path: data/records.parquet" in card
        and "accepted **3**" in card
        and "| cpu | 5 | 4 | 3 | 80% |" in card
    )
    assert "evidence of the accepted kernels: **0 device-verified, 2 cpu-screened**" in card
    assert "| add | `kernels/add/alice_add.py` |" in card and "| `cpu-screened` |" in card
    assert all(f"`{c.name}`" in card for c in COLUMNS), "the card documents every column"
    docs = (Path(__file__).resolve().parents[3] / "docs" / "dataset.md").read_text()
    assert all(f"| `{c.name}` |" in docs for c in COLUMNS), "docs/dataset.md documents every column"

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    import datasets

    ds = datasets.load_dataset(
        "parquet",
        data_files=str(out / "data" / "records.parquet"),
        split="train",
        cache_dir=str(tmp_path / "hf"),
    )
    assert ds.num_rows == 5
    assert ds.features["accepted"].dtype == "bool"
    assert {"author", "reviewers", "record_id", "kernel_code", "trials", "refines"} <= set(ds.column_names)
    accepted = ds.filter(lambda r: r["accepted"])
    assert sorted(accepted["author"]) == ["alice", "carol", "carol"]
    assert all(r["author"] not in r["reviewers"] for r in accepted)
    by_id = {r["record_id"]: r for r in ds}
    assert by_id[history["jobs"]["fix"]]["refines"] == history["jobs"]["wrong"]
    assert {json.loads(line)["record_id"] for line in lines} == set(by_id)
