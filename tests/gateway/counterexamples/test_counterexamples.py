"""Counterexamples end to end on a real gateway: a red-team agent submits one against an accepted kernel,
its job is judged by a worker over the workers' wire, the record is decided, the finder is told, and a
confirmed one becomes a regression PR in the finder's name that the gate admits and merges; the attacks
as an agent would try them (another finder, a hand-written or edited regression case, finishing one's
own job, an oversized generator)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_sync
from cxkit import INPUT, KERNEL, POLICY, REPO, CxGateway, accept_kernel, commit_on_branch, show

from gateway.counterexamples.models import Counterexample
from gateway.counterexamples.regression import case_bytes, regression_case
from gateway.jobs.settings import JobsSettings
from kstest.jobs_fixtures import pool_configs
from kstest.mcp_client import ToolFailed, call, mcp_session
from kstest.waiting import wait_for
from kswarm_contracts.counterexample import GENERATOR_MAX_BYTES


@pytest.fixture(scope="module")
def gw(redis_url: str) -> Iterator[CxGateway]:
    client = redis_sync.Redis.from_url(redis_url)
    client.flushall()
    client.close()
    tmp = Path(tempfile.mkdtemp(prefix="kscx"))
    gateway = CxGateway(tmp / "home", redis_url)
    gateway.jobs_settings = JobsSettings(
        pools_file=None, pools=pool_configs(), claim_idle_s=3600, reclaim_every_s=0.3
    )
    gateway.start()
    gateway.tokens = {n: gateway.add_principal(n) for n in ("alice", "bob", "rita", "carol", "mallory")}
    gateway.tokens["w1"] = gateway.add_principal("w1", "worker")
    with gateway.as_("operator") as op:
        assert op.post("/api/forge/repos", json={"org": "kswarm", "name": "dataset"}).status_code == 201
        assert op.put(f"/api/forge/repos/{REPO}/policy", json=POLICY).status_code == 200
    gateway.accepted = accept_kernel(gateway, tmp)
    try:
        yield gateway
    finally:
        gateway.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def body(gw: CxGateway, **extra: object) -> dict[str, object]:
    return {"task": "add", "repo": REPO, "kernel": KERNEL, "sha": gw.accepted, "input": INPUT, **extra}


def confirmed_outcome(n: int = 4097) -> dict[str, object]:
    judged = {**INPUT, "case": {"n": n}}
    return {
        "status": "confirmed",
        "reasons": [f"max abs error 2.1 at n={n} (the kernel covers one block of 4096)"],
        "input": judged,
        "inputs_tried": 1,
    }


def test_a_confirmed_counterexample_becomes_the_finders_regression_pr(gw: CxGateway, short_tmp: Path) -> None:
    reply = gw.submit_cx("rita", **body(gw, note="n just past one block"))
    assert reply.status_code == 201, reply.text
    cx = reply.json()
    assert (cx["finder"], cx["status"], cx["task"]) == ("rita", "pending", "add") and cx["job"]
    # the confirming job: the finder's, kind counterexample, carrying the input; listed like any job
    with gw.as_("rita") as c:
        job = c.get(f"/api/jobs/{cx['job']}").json()
        mine = [j["id"] for j in c.get("/api/jobs", params={"mine": "true"}).json()]
    assert (job["submitter"], job["kind"], job["sha"], job["kernel"]) == (
        "rita",
        "counterexample",
        gw.accepted,
        KERNEL,
    )
    assert job["counterexample"] == {
        "id": cx["id"],
        "input": {**INPUT, "layouts": {}, "special": []},
        "generator": None,
    }
    assert cx["job"] in mine
    assignment = gw.take_job(cx["job"])
    assert assignment["job"]["counterexample"]["id"] == cx["id"]
    # the kernel's verdict on the input is fail: confirmed
    assert gw.finish(assignment, "fail", {"counterexample": confirmed_outcome()}).json()["recorded"]
    done = wait_for(lambda: (r := gw.cx(cx["id"]))["regression_pr"] and r, what="the regression PR")
    assert done["status"] == "confirmed" and done["decided_at"] and "n=4097" in done["reasons"][0]
    notice = wait_for(lambda: [t for t in gw.inbox("rita") if cx["id"] in t], what="the finder's notice")
    assert "confirmed" in notice[0] and f"#{done['regression_pr']}" in notice[0]
    # the PR: the finder's, on the finder's branch, the file byte-equal to the regression case
    pr = gw.pr(done["regression_pr"])
    assert pr["author"] == "rita" and pr["head"] == f"rita/regression-{cx['id']}"
    assert pr["title"] == f"Regression case {cx['id']} for add (found by rita)"
    assert done["job"] in pr["body"] and KERNEL in pr["body"]
    path = f"tasks/add/regressions/{cx['id']}.json"
    content, author = show(gw, short_tmp, pr["head"], path)
    record = Counterexample.model_validate(done)
    assert content == case_bytes(regression_case(record))
    case = json.loads(content)
    assert (case["finder"], case["kernel"], case["sha"], case["job"]) == (
        "rita",
        KERNEL,
        gw.accepted,
        cx["job"],
    )
    assert author.startswith("rita <rita@")
    # it goes through the normal gate: no trusted-path block, no verification needed, bob's approval
    gate = gw.pr(pr["number"])["gate"]
    assert {r["code"] for r in gate["reasons"]} == {"approvals"}, gate
    gw.approve("bob", pr["number"])
    wait_for(lambda: gw.pr(pr["number"])["state"] == "merged", what="the regression PR to merge")
    gw.regression_path = path


def test_a_refused_counterexample_tells_the_finder_why(gw: CxGateway) -> None:
    cx = gw.submit_cx("rita", **body(gw)).json()
    assignment = gw.take_job(cx["job"])
    why = "the kernel matches the reference on this input (max abs error 0)"
    outcome = {"status": "refused", "reasons": [why], "input": INPUT, "inputs_tried": 1}
    assert gw.finish(assignment, "pass", {"counterexample": outcome}).json()["recorded"]
    done = wait_for(lambda: (r := gw.cx(cx["id"]))["status"] != "pending" and r, what="the decision")
    assert done["status"] == "refused" and done["reasons"] == [why] and done["regression_pr"] is None
    notice = wait_for(lambda: [t for t in gw.inbox("rita") if cx["id"] in t], what="the notice")
    assert f"refused: {why}" in notice[0]
    with gw.as_("bob") as c:  # any principal lists them
        listed = c.get("/api/counterexamples", params={"task": "add", "status": "refused"}).json()
    assert [x["id"] for x in listed] == [cx["id"]]


def test_submissions_are_checked_before_they_cost_a_job(gw: CxGateway, short_tmp: Path) -> None:
    def refused(who: str, **b: object) -> tuple[int, str]:
        reply = gw.submit_cx(who, **b)
        return reply.status_code, reply.text

    assert refused("carol", **body(gw, kernel="kernels/add/../x.py"))[0] == 422
    code, text = refused("carol", **body(gw, kernel="kernels/softmax/alice_block.py"))
    assert code == 422 and "task 'softmax'" in text
    code, text = refused("carol", **body(gw, repo="kswarm/other"))
    assert code == 422 and "not the dataset repo" in text
    code, text = refused("carol", **body(gw, generator="def generate(domain, seed):\n    return []\n"))
    assert code == 422 and "exactly one of input and generator" in text
    code, text = refused("carol", **{k: v for k, v in body(gw).items() if k != "input"})
    assert code == 422 and "exactly one of input and generator" in text
    # an open PR's head is no target under the default policy (merged only)
    sha = commit_on_branch(gw, short_tmp, "alice", "alice/add2", {"kernels/add/alice_v2.py": b"# v2\n"})
    gw.open_pr("alice", "alice/add2")
    code, text = refused("carol", **body(gw, kernel="kernels/add/alice_v2.py", sha=sha))
    assert code == 422 and "not a target" in text
    code, text = refused("carol", **body(gw, sha="0" * 40))
    assert code == 404
    code, text = refused("operator", **body(gw))
    assert code == 403 and "agents" in text
    # the budget: two pending, the third is a 429 that says why
    first, second = (gw.submit_cx("carol", **body(gw)) for _ in range(2))
    assert first.status_code == second.status_code == 201, (first.text, second.text)
    code, text = refused("carol", **body(gw))
    assert code == 429 and "max_pending_per_agent: 2" in text
    with gw.as_("carol") as c:  # carol's pending ones are jobs: cancel them so later tests take only theirs
        for reply in (first, second):
            assert c.post(f"/api/jobs/{reply.json()['job']}/cancel").status_code == 200
    wait_for(lambda: gw.cx(first.json()["id"])["status"] == "error", what="the cancelled one decided")


def test_attack_a_finder_named_in_the_body_is_refused(gw: CxGateway) -> None:
    before = all_ids(gw)
    for field in ("finder", "submitter", "author"):
        reply = gw.submit_cx("mallory", **body(gw, **{field: "rita"}))
        assert reply.status_code == 422 and field in reply.text, reply.text
    assert all_ids(gw) == before, "nothing was recorded"
    made = gw.submit_cx("mallory", **body(gw)).json()  # the finder is whoever holds the token
    assert made["finder"] == "mallory" and made["id"] not in before
    with gw.as_("mallory") as c:
        assert c.get(f"/api/jobs/{made['job']}").json()["submitter"] == "mallory"
        assert c.post(f"/api/jobs/{made['job']}/cancel").status_code == 200
    wait_for(lambda: gw.cx(made["id"])["status"] == "error", what="the cancelled one decided")


def all_ids(gw: CxGateway) -> set[str]:
    with gw.as_("operator") as c:
        return {x["id"] for x in c.get("/api/counterexamples").json()}


def test_attack_a_generator_over_the_limit_is_refused_at_submission(gw: CxGateway) -> None:
    big = "# " + "x" * GENERATOR_MAX_BYTES + "\n"
    reply = gw.submit_cx("mallory", **{**body(gw, generator=big), "input": None})
    assert reply.status_code == 422 and "generator" in reply.text
    wide = "# " + "é" * (GENERATOR_MAX_BYTES // 2 + 10) + "\n"  # under the limit in characters, not bytes
    reply = gw.submit_cx("mallory", **{**body(gw, generator=wide), "input": None})
    assert reply.status_code == 413 and "bytes" in reply.text


def test_attack_the_finder_cannot_finish_its_own_counterexample_job(gw: CxGateway) -> None:
    cx = gw.submit_cx("mallory", **body(gw)).json()
    fake = {"counterexample": confirmed_outcome()}
    forged = {"instance": "i0", "attempt": 1, "state": "failed", "verdict": "fail", "result": fake}
    with gw.as_("mallory") as c:
        reply = c.post(f"/api/jobs/{cx['job']}/finish", json=forged)
        assert reply.status_code == 403
        assert (
            c.post(
                "/api/jobs/pools/cpu/take", json={"instance": "i0", "node": "local", "free_devices": 1}
            ).status_code
            == 403
        )
    assert gw.cx(cx["id"])["status"] == "pending"
    with gw.as_("mallory") as c:
        assert c.post(f"/api/jobs/{cx['job']}/cancel").status_code == 200


def test_attack_hand_written_edited_or_deleted_regression_cases_are_blocked(
    gw: CxGateway, short_tmp: Path
) -> None:
    path = gw.regression_path
    if path is None:
        pytest.skip("needs the confirmed counterexample's merged regression case")
    real, _ = show(gw, short_tmp, "main", path)
    made_up = {"tasks/add/regressions/cx0123456789abcd.json": real.replace(b"rita", b"mallory")}
    edited = {path: real.replace(b'"seed": 3', b'"seed": 4')}
    copied = {path.replace("tasks/add/", "tasks/softmax/"): real}
    for i, files in enumerate((made_up, edited, copied, {path: None})):
        branch = f"mallory/regress-{i}"
        commit_on_branch(gw, short_tmp, "mallory", branch, files)
        number = gw.open_pr("mallory", branch)
        gw.approve("bob", number)

        def blocked(n: int = number) -> list[str]:
            gate = gw.pr(n)["gate"]
            return [r["message"] for r in gate["reasons"] if r["code"] == "trusted-path"]

        why = wait_for(blocked, what="the gate's block")
        assert gw.pr(number)["state"] == "open", why
        expected = (
            "no confirmed counterexample",
            "differs from the regression case",
            "no confirmed",
            "deletes",
        )[i]
        assert expected in why[0], why


async def test_the_mcp_tools_are_the_same_service(gw: CxGateway) -> None:
    async with mcp_session(gw.url, gw.tokens["carol"]) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert {"counterexample_submit", "counterexample_list", "counterexample_targets"} <= set(tools)
        assert "finder" not in tools["counterexample_submit"].input_schema["properties"], "the token's"
        found = await call(session, "counterexample_targets", task="add")
        assert found["domain"]["dims"]["n"][0] == 1, "the task's DOMAIN, read without running it"
        assert [(t["kernel"], t["sha"], t["accepted"]) for t in found["targets"]] == [
            (KERNEL, gw.accepted, True)
        ]
        with pytest.raises(ToolFailed, match="no commit"):
            await call(session, "counterexample_submit", task="add", kernel=KERNEL, sha="1" * 40, input=INPUT)
        made = await call(
            session, "counterexample_submit", task="add", kernel=KERNEL, sha=gw.accepted, input=INPUT
        )
        assert made["finder"] == "carol" and made["status"] == "pending"
        listed = await call(session, "counterexample_list", status="pending")
        assert made["id"] in [x["id"] for x in listed]
    with gw.as_("carol") as c:
        assert c.post(f"/api/jobs/{made['job']}/cancel").status_code == 200
