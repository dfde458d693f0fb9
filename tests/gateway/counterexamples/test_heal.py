"""The dataset heals itself (issue 27, point 4), on a real gateway (forge with its gate, board, jobs) and
jobs finished through the workers' wire: a regression case merged on the dataset repo's main re-verifies
every accepted kernel of its task (one job each, by the gate, marked ``reverify``); a kernel that fails
is withdrawn, its author and approvers told; one that passes stays. The definition route lists the case.

Attacks: an agent cannot set ``reverify``, cannot post a job's result, cannot withdraw a kernel with a
failing job of its own, and a regression file in a PR that is not merged heals nothing."""

from __future__ import annotations

import asyncio
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis as redis_sync

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dataset"))  # datasetkit (and forgekit)

from datasetkit import DatasetGateway, Lab, harness_result
from forgekit import Swarm

from gateway.client.jobs.pools import NodeConfig, PoolConfig
from gateway.counterexamples.heal import heal_sweep
from gateway.counterexamples.models import Counterexample
from gateway.counterexamples.plugin import CounterexamplesPlugin
from gateway.counterexamples.regression import open_regression_pr
from gateway.counterexamples.settings import CounterexampleSettings
from gateway.counterexamples.store import CounterexampleStore
from gateway.dataset.withdrawals import WithdrawalStore
from gateway.forge.gate.vouched import OperatorHeads
from gateway.forge.plugin import ForgePlugin
from gateway.forge.settings import ForgeSettings
from gateway.jobs.plugin import JobsPlugin
from gateway.jobs.settings import JobsSettings
from gateway.plugin import Plugin
from gateway.services import FORGE, JOB_SERVICE
from gateway.tasks.catalogue import solution_path
from gateway.tasks.plugin import TasksPlugin
from kstest.waiting import wait_for
from kswarm_contracts.counterexample import CounterexampleInput, RegressionCase
from orchestrator.demo.steps import WITHDRAWN_RE

T = TypeVar("T")
REPO = "kswarm/dataset"
AGENTS = ("alice", "bob", "carol", "mallory")
CASE = "cx" + "a1" * 6
BROKEN = "cx" + "b2" * 6
FAKE = "cx" + "f3" * 6


class HealGateway(DatasetGateway):
    """The dataset suites' gateway with a cpu pool that loads tasks from main (no tasks_dir)."""

    def plugins(self) -> list[Plugin[Any]]:
        forge = ForgePlugin(ForgeSettings(gate_sweep_s=0.5, default_repo=REPO))
        pool = PoolConfig(name="cpu", nodes=[NodeConfig(name="local", devices=[0])])
        jobs = JobsPlugin(JobsSettings(pools=[pool], reclaim_every_s=0.5))
        return [forge, TasksPlugin(), jobs, CounterexamplesPlugin(CounterexampleSettings(dataset_repo=REPO))]

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the gateway's own loop (its Redis pool and services live there)."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(60)

    @property
    def ctx(self) -> Any:
        assert self.app is not None
        return self.app.state.ctx


def regression(case_id: str, task: str = "add", n: int = 1000) -> bytes:
    return RegressionCase(
        id=case_id, task=task, input=CounterexampleInput(case={"n": n}, dtype="float32"),
        finder="mallory", kernel=f"kernels/{task}/alice_add.py", sha="0" * 40, job="j0123456789abc",
    ).model_dump_json().encode()  # fmt: skip


async def propose(gw: HealGateway, files: dict[str, bytes | None]) -> int:
    """An operator's PR changing files under tasks/ (a vouched head, as ``kswarm tasks add`` makes)."""
    forge = gw.ctx.services.get(FORGE)
    org, name = REPO.split("/")
    head = await forge.resolve_ref(org, name, "main")
    branch = f"operator/regression-{secrets.token_hex(3)}"
    commit = await forge.commit_files(
        "operator", org, name, "main", files, "Add a file", expected_head=head, new_branch=branch
    )
    await OperatorHeads(gw.ctx.redis).record(REPO, commit, branch, "main")
    pr = await forge.open_pr("operator", org, name, branch, "main", "Operator's change", "", ["bob"])
    return pr.number


async def confirmed_case_pr(gw: HealGateway, kernel: str, sha: str) -> int:
    """CASE, confirmed (as its confirming job leaves it), and the regression PR the gateway opens for it
    in its finder's name (gateway/counterexamples/regression.py)."""
    cx = Counterexample(
        id=CASE, finder="mallory", task="add", repo=REPO, kernel=kernel, sha=sha, status="confirmed",
        input=CounterexampleInput(case={"n": 1000}, dtype="float32"), job="j0123456789abc",
        created_at=time.time(), decided_at=time.time(),
    )  # fmt: skip
    await CounterexampleStore(gw.ctx.redis).save(cx)
    return await open_regression_pr(gw.ctx.services.get(FORGE), cx, "main")


def take(gw: HealGateway) -> dict[str, Any]:
    with gw.client(gw.tokens["worker1"]) as w:
        reply = w.post(
            "/api/jobs/pools/cpu/take",
            json={"instance": "i1", "node": "local", "free_devices": 1, "free_ids": ["0"], "wait_s": 5},
        )
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def finish(gw: HealGateway, assignment: dict[str, Any], passed: bool, case: str | None = None) -> None:
    job = assignment["job"]
    result = harness_result(job["task"], job["kernel"], passed)
    if case is not None:  # the harness's regression trial (the harness half of issue 27 writes it)
        result["trials"].append(
            {**result["trials"][0], "index": 3, "ok": passed, "regression": case, "flags": ["mismatch"],
             "max_abs_err": 0.5, "detail": "row length 1000: tail not stored"}
        )  # fmt: skip
    body = {
        "instance": "i1",
        "attempt": assignment["attempt"],
        "state": "succeeded" if passed else "failed",
        "verdict": "pass" if passed else "fail",
        "exit_code": 0 if passed else 1,
        "result": result,
    }
    with gw.client(gw.tokens["worker1"]) as w:
        reply = w.post(f"/api/jobs/{job['id']}/finish", json=body)
    assert reply.status_code == 200 and reply.json()["recorded"], reply.text


def jobs(gw: HealGateway) -> list[dict[str, Any]]:
    with gw.op() as op:
        return list(op.get("/api/jobs", params={"limit": 500}).json())


def notices(gw: HealGateway, who: str) -> list[str]:
    with gw.client(gw.tokens[who]) as c:
        items = c.get("/api/inbox", params={"peek": "true", "limit": 500}).json()["items"]
    return [
        i["text"]
        for i in items
        if i["sender"] == "gate" and i["reason"] == "notice" and "withdrawn" in i["text"]
    ]


@pytest.fixture(scope="module")
def healed(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """alice's and carol's add kernels and carol's relu merge (bob approves); mallory's PR adding a
    hand-written regression file stays blocked; an operator's file that is no case merges; then CASE is
    confirmed and its regression PR (mallory's, as the gateway opens it) merges."""
    client = redis_sync.Redis.from_url(redis_url, decode_responses=True)
    client.flushall()
    tmp = Path(tempfile.mkdtemp(prefix="kshl"))
    gw = HealGateway(tmp / "home", redis_url)
    gw.start()
    try:
        gw.tokens = {n: gw.add_principal(n) for n in AGENTS}
        gw.tokens["worker1"] = gw.add_principal("worker1", "worker")
        with gw.op() as op:
            assert op.post("/api/tasks/seed", json={"post_tasks": False}).status_code == 200
            policy = {"dataset": True, "required_approvals": 1, "required_checks": ["kswarm/verify:cpu"]}
            assert op.put(f"/api/forge/repos/{REPO}/policy", json=policy).status_code == 200
        swarm = Swarm(gw, tmp_path_factory.mktemp("heal"), "kswarm", "dataset", gw.tokens)
        lab, work = Lab(gw, swarm), {}
        merged: dict[str, dict[str, Any]] = {}
        for who, task, path in (
            ("alice", "add", "kernels/add/alice_add.py"),
            ("carol", "add", "kernels/add/carol_add.py"),
            ("carol", "relu", "kernels/relu/carol_relu.py"),
        ):
            sha = lab.push(who, f"{who}/{task}", path, solution_path(task).read_text(), work)
            lab.verify(who, task, path, sha, True)
            pr = swarm.open_pr(who, f"{who}/{task}", reviewers=("bob",))
            assert swarm.review("bob", pr, "APPROVED").status_code == 200
            swarm.wait_merged(pr)
            merged[path] = {"sha": sha, "pr": pr, "author": who}
        # mallory's fake case: on her branch, in a PR nobody merges (the gate blocks tasks/ anyway)
        fake_path = f"tasks/add/regressions/{FAKE}.json"
        lab.push("mallory", "mallory/cx", fake_path, regression(FAKE).decode(), work)
        fake_pr = swarm.open_pr("mallory", "mallory/cx", reviewers=("bob",))
        assert swarm.review("bob", fake_pr, "APPROVED").status_code == 200
        sweep_before = gw.run(heal_sweep(gw.ctx))
        # an operator's hand-made file that is no case: listed with its error, run by nobody
        broken = gw.run(propose(gw, {f"tasks/add/regressions/{BROKEN}.json": b"{not json"}))
        assert swarm.review("bob", broken, "APPROVED").status_code == 200
        swarm.wait_merged(broken)
        sweep_broken = gw.run(heal_sweep(gw.ctx))
        alice = merged["kernels/add/alice_add.py"]
        number = gw.run(confirmed_case_pr(gw, "kernels/add/alice_add.py", alice["sha"]))
        assert swarm.review("bob", number, "APPROVED").status_code == 200
        swarm.wait_merged(number)
        yield {
            "gw": gw, "swarm": swarm, "lab": lab, "merged": merged, "fake_pr": fake_pr,
            "sweep_before": sweep_before, "sweep_broken": sweep_broken, "redis": client,
        }  # fmt: skip
    finally:
        gw.stop()
        client.close()
        shutil.rmtree(tmp, ignore_errors=True)


def reverify_jobs(gw: HealGateway) -> list[dict[str, Any]]:
    return [j for j in jobs(gw) if j.get("reverify")]


def test_a_merged_regression_case_reverifies_each_accepted_kernel_and_withdraws_the_one_that_fails(
    healed: dict[str, Any],
) -> None:
    gw: HealGateway = healed["gw"]
    merged = healed["merged"]
    assert healed["sweep_before"] == [], "a regression file in an open PR heals nothing"
    assert healed["sweep_broken"] == [], "a file that is no case heals nothing"
    found = wait_for(lambda: len(got := reverify_jobs(gw)) >= 2 and got, 30)
    by_kernel = {j["kernel"]: j for j in found}
    assert sorted(by_kernel) == ["kernels/add/alice_add.py", "kernels/add/carol_add.py"], found
    for kernel, job in by_kernel.items():
        assert (job["submitter"], job["reverify"], job["sha"], job["pool"], job["priority"], job["kind"]) == (
            "gate",
            CASE,
            merged[kernel]["sha"],
            "cpu",
            "normal",
            "verify",
        )
    assert gw.run(heal_sweep(gw.ctx)) == [], "a case heals once"

    # The definition lists the case (and reports the unparsable file instead of failing)
    with gw.client(gw.tokens["worker1"]) as w:
        definition = w.get("/api/tasks/add/definition", params={"repo": REPO}).json()
    cases = {r["id"]: r for r in definition["regressions"]}
    assert set(cases) == {CASE, BROKEN} and cases[CASE]["error"] is None
    assert RegressionCase.model_validate_json(cases[CASE]["content"]).id == CASE
    assert "not a regression case" in cases[BROKEN]["error"]
    with gw.client(gw.tokens["worker1"]) as w:
        catalogue = w.get("/api/tasks/add/definition", params={"repo": "kswarm/nosuch"})
    assert catalogue.status_code == 200 and catalogue.json()["regressions"] == []

    # The worker runs both: alice's fails the case, carol's passes
    for _ in range(2):
        assignment = take(gw)
        alice = assignment["job"]["kernel"] == "kernels/add/alice_add.py"
        finish(gw, assignment, passed=not alice, case=CASE)
    store = WithdrawalStore(gw.ctx.redis)
    withdrawn = wait_for(lambda: gw.run(store.all(REPO)) or None, 20)
    assert len(withdrawn) == 1
    w = withdrawn[0]
    alice_sha = merged["kernels/add/alice_add.py"]["sha"]
    assert (w.kernel, w.sha, w.task, w.counterexample, w.author) == (
        "kernels/add/alice_add.py",
        alice_sha,
        "add",
        CASE,
        "alice",
    )
    assert w.job == by_kernel["kernels/add/alice_add.py"]["id"] and "fails regression case" in w.reason
    assert "tail not stored" in w.reason
    for who in ("alice", "bob"):  # the author and the reviewer who approved its PR
        told = wait_for(lambda who=who: notices(gw, who) or None, 20)
        assert len(told) == 1 and "kernels/add/alice_add.py" in told[0] and CASE in told[0]
        found = WITHDRAWN_RE.search(told[0])  # what the demo's developer answers with a new PR
        assert found is not None and found.group(1) == "kernels/add/alice_add.py", told[0]
    assert notices(gw, "carol") == [], "carol's kernel passed: nothing withdrawn, nobody told"
    record = Counterexample.model_validate_json(healed["redis"].get(f"ks:cx:{CASE}"))
    assert record.regression_merged and record.withdrew, record

    # idempotent: the outcome delivered again changes nothing, and nobody is told twice
    svc = gw.ctx.services.get(JOB_SERVICE)
    assert gw.run(svc.outcomes.deliver(w.job))
    assert len(gw.run(store.all(REPO))) == 1 and len(notices(gw, "alice")) == 1
    # a withdrawn kernel is not re-verified by a later case
    assert gw.run(heal_sweep(gw.ctx)) == []


def test_an_agent_cannot_mark_a_job_as_a_heal_nor_withdraw_a_kernel(healed: dict[str, Any]) -> None:
    gw: HealGateway = healed["gw"]
    carol = healed["merged"]["kernels/add/carol_add.py"]
    body = {"kernel": "kernels/add/carol_add.py", "ref": carol["sha"], "reverify": CASE}
    with gw.client(gw.tokens["mallory"]) as m:
        refused = m.post("/api/jobs", json=body)
        assert refused.status_code == 422 and "reverify" in refused.text, refused.text
        # her own job on carol's kernel, which a worker then fails: not a heal, so nothing is withdrawn
        del body["reverify"]
        own = m.post("/api/jobs", json=body)
        assert own.status_code == 201, own.text
        assert own.json()["reverify"] is None
        # and she cannot post its result herself
        forged = m.post(
            f"/api/jobs/{own.json()['id']}/finish",
            json={"instance": "i1", "attempt": 1, "state": "failed", "verdict": "fail", "exit_code": 1},
        )
        assert forged.status_code == 403, forged.text
    assignment = take(gw)
    assert assignment["job"]["id"] == own.json()["id"]
    finish(gw, assignment, passed=False, case=CASE)
    wait_for(lambda: next(j for j in jobs(gw) if j["id"] == own.json()["id"])["state"] == "failed", 20)
    withdrawn = gw.run(WithdrawalStore(gw.ctx.redis).all(REPO))
    assert [w.kernel for w in withdrawn] == ["kernels/add/alice_add.py"], "carol's kernel stays accepted"
    # mallory's fake case never merged: no job re-verifies against it
    assert all(j["reverify"] != FAKE for j in jobs(gw))
    assert not healed["swarm"].pr(healed["fake_pr"])["merged"]
