"""``GET /api/dataset`` serves the last build under $KSWARM_HOME/dataset; the UI's Dataset panel shows it."""

from __future__ import annotations

import json

from kstest.gateway import GatewayThread


def write_build(gateway: GatewayThread) -> None:
    root = gateway.home / "dataset"
    (root / "data").mkdir(parents=True)
    summary = {
        "repo": "kswarm/dataset",
        "records": 3,
        "accepted": 1,
        "pass_rate": 0.67,
        "by_task": {"softmax": {"records": 2, "passed": 1, "accepted": 1, "pass_rate": 0.5}},
        "pools": {"cpu": {"records": 3, "passed": 2, "accepted": 1, "pass_rate": 0.67}},
    }
    (root / "summary.json").write_text(json.dumps(summary))
    rows = [
        {"record_id": "j1", "task": "softmax", "author": "dev-1", "reviewers": ["rev-1"], "accepted": False},
        {"record_id": "j2", "task": "softmax", "author": "dev-1", "reviewers": ["rev-1"], "accepted": True},
    ]
    (root / "data" / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_dataset_endpoint_before_and_after_a_build(gateway: GatewayThread) -> None:
    agent = gateway.add_principal("dev-1")
    with gateway.client(agent) as c:
        missing = c.get("/api/dataset")
        assert missing.status_code == 404 and "kswarm dataset build" in missing.json()["detail"]
    with gateway.client(None) as anon:
        assert anon.get("/api/dataset").status_code == 401
    write_build(gateway)
    with gateway.client(agent) as c:
        body = c.get("/api/dataset").json()
    assert body["summary"]["accepted"] == 1 and body["pools"]["cpu"]["pass_rate"] == 0.67
    assert [r["record_id"] for r in body["accepted_records"]] == ["j2"]
    assert body["accepted_records"][0]["reviewers"] == ["rev-1"]


def test_dataset_panel_shows_the_build(gateway: GatewayThread) -> None:
    write_build(gateway)
    with gateway.client(gateway.operator_token) as op:
        page = op.get("/ui/dataset", headers={"Accept": "text/html"})
    assert page.status_code == 200
    assert "softmax" in page.text and "Not available yet" not in page.text
