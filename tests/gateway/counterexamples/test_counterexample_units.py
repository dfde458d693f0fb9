"""The pieces without a gateway: what the worker hands the harness for a counterexample job, the gate's
regression rule against a forge stand-in, and how a job's result decides a record."""

from __future__ import annotations

import asyncio
import stat
import time
from pathlib import Path
from typing import Any

from gateway.client.jobs.models import CounterexampleJob, Job, JobState
from gateway.client.jobs.pools import NodeConfig, PoolConfig
from gateway.counterexamples.models import Counterexample, CounterexampleRequest
from gateway.counterexamples.outcome import decide
from gateway.counterexamples.regression import case_bytes, regression_case
from gateway.counterexamples.service import CounterexampleService
from gateway.counterexamples.settings import CounterexampleSettings
from gateway.counterexamples.targets import task_domain
from gateway.errors import CounterexampleError
from gateway.forge.gate.evidence import Verification
from gateway.forge.gate.kernels import DEFAULT_TRUSTED_PATHS, classify
from gateway.forge.gate.regressions import admit_regressions, parse_regression_path
from gateway.forge.models import ChangedFile, PullRequest, RepoFile
from kswarm_contracts.counterexample import CounterexampleInput
from orchestrator.worker.results import harness_argv, write_counterexample

CX = "cx0123456789abcdef"
KERNEL = "kernels/add/alice_block.py"
INPUT = CounterexampleInput(case={"n": 4097}, dtype="float32", seed=3)
POOL = PoolConfig(name="cpu", nodes=[NodeConfig(name="local", devices=[0])])


def job(payload: CounterexampleJob | None, **extra: Any) -> Job:
    fields: dict[str, Any] = {
        "id": "j0123456789abc",
        "submitter": "rita",
        "repo": "kswarm/dataset",
        "ref": "a" * 40,
        "sha": "a" * 40,
        "task": "add",
        "kernel": "kernels/add/alice_block.py",
        "pool": "cpu",
        "devices": 0,
        "kind": "counterexample" if payload else "verify",
        "counterexample": payload,
        "timeout_s": 60,
        "submitted": time.time(),
    }
    return Job(**{**fields, **extra})


def test_the_worker_writes_the_input_read_only_and_passes_it_to_the_harness(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    j = job(CounterexampleJob(id=CX, input=INPUT))
    path = write_counterexample(j, out)
    assert path == out / "counterexample" / "input.json"
    assert CounterexampleInput.model_validate_json(path.read_text()) == INPUT
    assert stat.S_IMODE(path.stat().st_mode) == 0o444 and stat.S_IMODE(path.parent.stat().st_mode) == 0o555
    argv = harness_argv(
        POOL, j, tmp_path / "task", tmp_path / "k.py", out / "result.json", counterexample=path
    )
    assert argv[argv.index("--counterexample-input") + 1] == str(path) and "--no-timing" in argv
    path.parent.chmod(0o755)  # let tmp_path clean up


def test_the_worker_writes_a_generator_and_nothing_for_other_jobs(tmp_path: Path) -> None:
    source = "def generate(domain, seed):\n    return []\n"
    j = job(CounterexampleJob(id=CX, generator=source))
    path = write_counterexample(j, tmp_path)
    assert path is not None and path.name == "generator.py" and path.read_text() == source
    argv = harness_argv(POOL, j, tmp_path, tmp_path / "k.py", tmp_path / "r.json", counterexample=path)
    assert argv[-2:] == ["--counterexample-generator", str(path)]
    path.parent.chmod(0o755)
    plain = job(None)
    assert write_counterexample(plain, tmp_path / "x") is None
    assert not any("counterexample" in a for a in harness_argv(POOL, plain, tmp_path, tmp_path, tmp_path))


def confirmed(**extra: Any) -> Counterexample:
    fields: dict[str, Any] = {
        "id": CX,
        "finder": "rita",
        "task": "add",
        "repo": "kswarm/dataset",
        "kernel": "kernels/add/alice_block.py",
        "sha": "a" * 40,
        "input": INPUT,
        "status": "confirmed",
        "job": "j0123456789abc",
        "created_at": 1.0,
    }
    return Counterexample(**{**fields, **extra})


class Forge:
    """Only what the rule reads: the file at the head."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files

    async def read_file(self, org: str, repo: str, ref: str, path: str, max_bytes: int | None = None) -> Any:
        content = self.files.get(path)
        return (
            None if content is None else RepoFile(path=path, sha="0" * 40, size=len(content), content=content)
        )


class Source:
    def __init__(self, cases: dict[str, bytes]) -> None:
        self.cases = cases

    async def expected(self, repo: str, path: str) -> bytes | None:
        return self.cases.get(path)


def gate_blocks(files: dict[str, bytes | None], source: Source | None) -> list[str]:
    changed = [ChangedFile(path=p, status="deleted" if c is None else "added") for p, c in files.items()]
    changes = classify(changed, author="rita", dataset=True, trusted_paths=list(DEFAULT_TRUSTED_PATHS))
    pr = PullRequest(org="kswarm", repo="dataset", number=1, title="t", author="rita", head="h", base="main")
    pr.head_sha = "b" * 40
    head = {p: c for p, c in files.items() if c is not None}
    asyncio.run(admit_regressions(Forge(head), pr, changes, source))  # type: ignore[arg-type]
    return [b.why for b in changes.blocked]


def test_the_gate_admits_only_a_confirmed_case_byte_for_byte() -> None:
    path = f"tasks/add/regressions/{CX}.json"
    real = case_bytes(regression_case(confirmed()))
    source = Source({path: real})
    assert gate_blocks({path: real}, source) == []
    assert "no confirmed counterexample" in gate_blocks({path: real}, Source({}))[0]
    assert "no confirmed counterexample" in gate_blocks({path: real}, None)[0], "fails closed"
    assert "differs" in gate_blocks({path: real.replace(b"rita", b"mallory")}, source)[0]
    assert "deletes a regression case" in gate_blocks({path: None}, source)[0]
    # the rule lifts only regression files: task.py beside it stays the operators'
    assert "trusted file" in gate_blocks({path: real, "tasks/add/task.py": b"x"}, source)[0]
    assert parse_regression_path(path) == ("add", CX)
    assert parse_regression_path(f"tasks/add/regressions/../{CX}.json") is None


def test_a_jobs_result_decides_the_record() -> None:
    pending = confirmed(status="pending", job=None)
    outcome = {"status": "confirmed", "reasons": ["wrong at n=4097"], "input": INPUT.model_dump()}
    failed = job(None, state=JobState.failed, verdict="fail", result={"counterexample": outcome})
    assert decide(pending, failed).status == "confirmed"
    passed = job(None, state=JobState.succeeded, verdict="pass", result={"counterexample": outcome})
    lied = decide(pending, passed)
    assert lied.status == "error" and "verdict is pass" in lied.reasons[0]
    crashed = job(None, state=JobState.error, verdict="error", error="harness crashed", result=None)
    assert decide(pending, crashed).reasons == ["harness crashed"]
    bad = job(None, state=JobState.failed, verdict="fail", result={"counterexample": {"status": "yes"}})
    assert decide(pending, bad).status == "error"


def test_a_tasks_domain_is_read_without_running_it() -> None:
    assert task_domain('import os\nDOMAIN = {"dims": {"n": [1, 8]}}\n') == {"dims": {"n": [1, 8]}}
    assert task_domain("DOMAIN = make_domain()\n") is None
    assert task_domain("x = 1\n") is None


class TargetForge:
    """The PR lists ``check_target`` reads."""

    def __init__(self, merged_head: str, open_head: str) -> None:
        base = {"org": "kswarm", "repo": "dataset", "title": "t", "author": "alice", "base": "main"}
        self.closed = [
            PullRequest(
                number=1, head="alice/a", state="closed", merged=True, merged_head_sha=merged_head, **base
            )
        ]
        self.open = [PullRequest(number=2, head="alice/b", head_sha=open_head, **base)]

    async def list_prs(self, org: str, repo: str, state: str = "open") -> list[PullRequest]:
        return self.closed if state == "closed" else self.open


class Ledger:
    def __init__(self, passes: dict[str, str]) -> None:
        self.passes = passes  # sha -> kernel with a passing verify job there

    async def for_sha(self, repo: str, sha: str) -> list[Verification]:
        kernel = self.passes.get(sha)
        if kernel is None:
            return []
        job = {"job_id": "j1", "submitter": "alice", "state": "succeeded", "verdict": "pass"}
        return [Verification(repo=repo, sha=sha, kernel=kernel, task="add", pool="cpu", kind="verify", **job)]


def check_target(targets: str, sha: str, passes: dict[str, str]) -> str | None:
    settings = CounterexampleSettings(targets=targets)  # type: ignore[arg-type]
    svc = CounterexampleService.__new__(CounterexampleService)
    svc.settings, svc.forge, svc.ledger = settings, TargetForge("m" * 40, "o" * 40), Ledger(passes)  # type: ignore[assignment]
    request = CounterexampleRequest(task="add", repo="kswarm/dataset", kernel=KERNEL, sha=sha, input=INPUT)
    try:
        asyncio.run(svc.check_target(request))
    except CounterexampleError as exc:
        return exc.message
    return None


def test_the_spec_policy_decides_what_may_be_attacked() -> None:
    merged, opened = "m" * 40, "o" * 40
    assert check_target("merged", merged, {merged: KERNEL}) is None
    assert "no passing verification" in (check_target("merged", merged, {}) or "")
    assert "no merged PR's head" in (check_target("merged", opened, {}) or "")
    assert check_target("merged-and-open", opened, {}) is None
    assert "open PRs' heads" in (check_target("merged-and-open", "x" * 40, {}) or "")
