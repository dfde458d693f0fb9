"""A confirmed counterexample's regression case: its one file, the PR that proposes it, and what the
review gate compares a PR's regression files with.

The file is ``tasks/<task>/regressions/<id>.json``, the ``RegressionCase`` in one canonical form
(``case_bytes``). The gateway commits it as the finder (the commit's author, credited) on a new branch
``<finder>/regression-<id>`` and opens a PR to the dataset repo's main, which goes through the normal
review gate: another agent approves; no kernel changes, so no verification is needed. The gate admits
a regression file only when it is byte-equal to the case of a confirmed counterexample in the store
(``ConfirmedRegressions``, the gate's ``RegressionSource``), so nobody hand-writes, edits or deletes one.
"""

from __future__ import annotations

from gateway.counterexamples.models import Counterexample
from gateway.counterexamples.store import CounterexampleStore
from gateway.errors import CounterexampleError, ForgeError
from gateway.forge.gate.regressions import parse_regression_path, regression_path
from gateway.forge.protocol import Forge
from gateway.tasks.definitions import split_repo
from kswarm_contracts.counterexample import RegressionCase


def regression_case(cx: Counterexample) -> RegressionCase:
    """The case of a confirmed counterexample: the input the harness judged (a generator's first failing
    one), credited to its finder, with the kernel, sha and job that confirmed it."""
    judged = cx.outcome.input if cx.outcome is not None and cx.outcome.input is not None else cx.input
    if cx.status != "confirmed" or judged is None or cx.job is None:
        raise CounterexampleError(f"counterexample {cx.id} is {cx.status}: it has no regression case", 409)
    return RegressionCase(
        id=cx.id, task=cx.task, input=judged, finder=cx.finder, kernel=cx.kernel, sha=cx.sha, job=cx.job
    )


def case_bytes(case: RegressionCase) -> bytes:
    """The one canonical form of a regression file (what the gate compares byte for byte)."""
    return (case.model_dump_json(indent=2) + "\n").encode()


def pr_body(cx: Counterexample) -> str:
    reasons = "\n".join(f"- {r}" for r in cx.reasons) or "- (the harness gave no detail)"
    note = f"\n\nThe finder's note: {cx.note}" if cx.note else ""
    return (
        f"Counterexample {cx.id}, found by @{cx.finder}, confirmed by job {cx.job}: "
        f"{cx.kernel} @ {cx.sha[:12]} fails on this input, which is inside the task's domain and on which "
        f"the reference runs.\n\nWhat the harness found:\n{reasons}{note}\n\n"
        f"Merging adds {regression_path(cx.task, cx.id)}: every later verification of {cx.task} runs it, "
        "and the accepted kernels of the task are re-verified against it. The gate admits this file only "
        "because it is this confirmed counterexample's case, byte for byte."
    )


async def open_regression_pr(forge: Forge, cx: Counterexample, base: str) -> int:
    """Commit the case as the finder on ``<finder>/regression-<id>`` and open its PR to ``base``; the PR's
    number. Idempotent: a branch or PR made by an earlier try is reused."""
    org, name = split_repo(cx.repo)
    path = regression_path(cx.task, cx.id)
    branch = f"{cx.finder}/regression-{cx.id}"
    title = f"Regression case {cx.id} for {cx.task} (found by {cx.finder})"
    for pr in await forge.list_prs(org, name, "all"):
        if pr.head == branch and pr.base == base:
            return pr.number
    if await forge.resolve_ref(org, name, branch) is None:
        message = f"{title}\n\nConfirmed by job {cx.job} on {cx.kernel} @ {cx.sha[:12]}."
        files: dict[str, bytes | None] = {path: case_bytes(regression_case(cx))}
        await forge.commit_files(cx.finder, org, name, base, files, message, new_branch=branch)
    try:
        pr = await forge.open_pr(cx.finder, org, name, branch, base, title, pr_body(cx))
    except ForgeError:
        found = [p for p in await forge.list_prs(org, name, "all") if p.head == branch and p.base == base]
        if not found:
            raise
        return found[0].number
    return pr.number


class ConfirmedRegressions:
    """The gate's ``RegressionSource``: the bytes a regression file must have, from the store."""

    def __init__(self, store: CounterexampleStore, dataset_repo: str) -> None:
        self.store = store
        self.dataset_repo = dataset_repo

    async def expected(self, repo: str, path: str) -> bytes | None:
        parsed = parse_regression_path(path)
        if parsed is None or repo != self.dataset_repo:
            return None
        task, cx_id = parsed
        cx = await self.store.get(cx_id)
        if cx is None or cx.status != "confirmed" or cx.task != task or cx.repo != repo:
            return None
        try:
            return case_bytes(regression_case(cx))
        except CounterexampleError:
            return None
