"""The dataset heals itself (issue 27, point 4): a regression case merged on a dataset repo's main
re-verifies every accepted kernel of its task, and a kernel that fails it is withdrawn.

**Trigger.** ``heal_sweep`` runs in the counterexample component's background (``kswarm-heal``,
``plugin.py``) every few seconds: for every repo whose default branch is a protected dataset branch it
reads main's head (one ``resolve_ref``) and, when it moved, lists ``tasks/<task>/regressions/<id>.json``
there. Main only moves by the gate's merges, so a case that appears there came through a merged,
reviewed PR; it must also sit on an operator-only path of that branch (``definitions.task_regressions``).
Cases already seen are remembered (``ks:heal:known:<repo>``), so each new one heals once.

**Re-verification.** An accepted kernel is what the dataset build calls accepted: a passing ``verify``
record (the job runner's ledger, ``ks:forge:verify:<repo>:<sha>``) at the head sha a merged PR into main
was merged at. For each kernel path of the task the latest such sha gets one ``verify`` job per pool
that passed it, at normal priority, submitted by the ``gate`` principal with ``Job.reverify`` = the case
id (visible in the jobs list and UI). No route sets ``reverify``: it is no request field, and
``JobService.submit`` takes it only from the gate principal. Kernels already withdrawn are skipped; a
(case, kernel, sha, pool) is submitted once (``ks:heal:jobs:<repo>``). The job's task definition lists
the new case (``GET /api/tasks/{task}/definition``), so the harness runs it.

**Outcome.** ``reverified`` runs after every job's final state is delivered (``JobOutcomes.after_final``,
registered by ``plugin.py``):
``failed`` with verdict ``fail`` withdraws the kernel at that sha (``WithdrawalStore``: reason, the
failing regression case, the job, the author), tells its author and the reviewers who approved its PR
(a ``notice`` from ``gate`` in the gate's channel, like its merge notices),
and updates the counterexample's record. A pass, an error or a timeout leaves it accepted. Every step is
idempotent (the withdrawal is ``HSETNX``, the notices carry dedupe keys), so a repeated delivery
changes nothing.

The counterexample record is read and written at ``ks:cx:<id>`` (a ``Counterexample`` as JSON): the
store of ``gateway/counterexamples/`` keeps it there.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import ValidationError

from gateway.cancellation import nap, rounds
from gateway.client.jobs.models import Job, JobRequest, JobState
from gateway.context import GatewayContext
from gateway.counterexamples.models import Counterexample
from gateway.dataset.withdrawals import Withdrawal, WithdrawalStore, withdrawal_key
from gateway.errors import ForgeError, GatewayError
from gateway.forge.gate.ledger import EvidenceLedger
from gateway.forge.gate.policy import ReviewPolicy
from gateway.forge.models import PullRequest, RepoInfo
from gateway.forge.protocol import Forge
from gateway.principals import Principal, PrincipalKind
from gateway.services import EVIDENCE_LEDGER, FORGE, JOB_SERVICE, REVIEW_GATE
from gateway.tasks.definitions import REGRESSION_MAX_BYTES, regression_file, trusts_tasks
from kswarm_contracts.counterexample import REGRESSIONS_DIR

log = logging.getLogger("kswarm.heal")
GATE = "gate"  # the gateway's own principal (the gate's): it submits the re-verification jobs
HEAL_EVERY_S = 2.0
CASE_PATH_RE = re.compile(rf"^tasks/(?P<task>[a-z0-9][a-z0-9_.-]{{0,63}})/{REGRESSIONS_DIR}/[^/]+\.json$")


def head_key(repo: str) -> str:
    return f"ks:heal:head:{repo}"  # main's head the heal last read


def known_key(repo: str) -> str:
    return f"ks:heal:known:{repo}"  # set of "<task>/<case id>" seen on main


def jobs_key(repo: str) -> str:
    return f"ks:heal:jobs:{repo}"  # hash "<case>:<kernel>@<sha>:<pool>" -> the re-verification job


def counterexample_key(case_id: str) -> str:
    return f"ks:cx:{case_id}"  # the Counterexample record (gateway/counterexamples/)


@dataclass
class Accepted:
    """One kernel path's latest accepted commit."""

    kernel: str
    sha: str
    pr: PullRequest
    pools: set[str] = field(default_factory=set)
    records: list[str] = field(default_factory=list)  # the passing verification jobs (dataset record ids)


async def gate_principal(ctx: GatewayContext) -> Principal | None:
    principal, _ = await ctx.principals.ensure(GATE, PrincipalKind.gate)
    if principal.kind != PrincipalKind.gate:  # someone else holds the name: never act as it
        log.warning("principal %s is a %s: the heal does not run", GATE, principal.kind.value)
        return None
    return principal


def agent_of(email: str | None) -> str | None:
    """The principal behind a commit e-mail ``<name>@<kind>s.<swarm>`` (the forge enforces it)."""
    if not email or "@" not in email:
        return None
    return email.split("@", 1)[0] or None


# -- which cases are new on main ---------------------------------------------------------------


async def cases_on_main(forge: Forge, info: RepoInfo, policy: ReviewPolicy, head: str) -> dict[str, str]:
    """``"<task>/<id>"`` -> task, for every usable regression case at ``head`` on a trusted path."""
    files = await forge.read_tree(
        info.org, info.name, head, prefix="tasks/", suffixes=(".json",), max_bytes=REGRESSION_MAX_BYTES
    )
    found: dict[str, str] = {}
    for f in files:
        m = CASE_PATH_RE.match(f.path)
        if m is None or not trusts_tasks(policy, m["task"]):
            continue
        if not any(fnmatch.fnmatchcase(f.path, p) for p in policy.trusted_paths):
            continue
        case = regression_file(m["task"], f.path, f.sha, f.size, f.text())
        if case is not None and case.error is None:
            found[f"{m['task']}/{case.id}"] = m["task"]
    return found


async def heal_sweep(ctx: GatewayContext) -> list[Job]:
    """Re-verify the accepted kernels of every task that gained a regression case on a dataset main."""
    forge = ctx.services.find(FORGE)
    if forge is None or ctx.services.find(JOB_SERVICE) is None:
        return []
    submitted: list[Job] = []
    for info in await forge.list_repos():
        policy = await forge.get_protection(info.org, info.name, info.default_branch)
        if policy is None or not policy.dataset:
            continue
        head = await forge.resolve_ref(info.org, info.name, info.default_branch)
        if head is None or await ctx.redis.get(head_key(info.full_name)) == head:
            continue
        cases = await cases_on_main(forge, info, policy, head)
        known = set(await ctx.redis.smembers(known_key(info.full_name)))
        new = sorted(set(cases) - known)
        by_task: dict[str, list[str]] = {}
        for name in new:
            by_task.setdefault(cases[name], []).append(name.partition("/")[2])
        for task, ids in sorted(by_task.items()):
            for case_id in ids:
                await mark_merged(ctx, case_id)
            submitted += await reverify_task(ctx, info, task, ids[0])
        if new:  # remembered only once every job is queued: a crash before heals again (deduped)
            await ctx.redis.sadd(known_key(info.full_name), *new)
        await ctx.redis.set(head_key(info.full_name), head)
    return submitted


# -- accepted kernels and their re-verification ------------------------------------------------


async def accepted_kernels(forge: Forge, ledger: EvidenceLedger, info: RepoInfo, task: str) -> list[Accepted]:
    """Each kernel path of ``task``'s latest commit that a merged PR into main was merged at with a
    passing verification of that path (what the dataset build marks ``accepted``)."""
    prefix = f"kernels/{task}/"
    merged = [
        pr
        for pr in await forge.list_prs(info.org, info.name, state="closed")
        if pr.merged and pr.base == info.default_branch and pr.merged_head_sha
    ]
    latest: dict[str, Accepted] = {}
    for pr in sorted(merged, key=lambda p: (p.merged_at or 0.0, p.number)):
        sha = pr.merged_head_sha or ""
        passes = [
            r
            for r in await ledger.for_sha(info.full_name, sha)
            if r.kernel.startswith(prefix) and r.task == task and r.kind == "verify" and r.outcome == "pass"
        ]
        for kernel in sorted({r.kernel for r in passes}):
            mine = [r for r in passes if r.kernel == kernel]
            latest[kernel] = Accepted(
                kernel, sha, pr, {r.pool for r in mine}, [r.job_id for r in mine]
            )  # a later merge of the same path supersedes an earlier one
    return [latest[k] for k in sorted(latest)]


async def reverify_task(ctx: GatewayContext, info: RepoInfo, task: str, case_id: str) -> list[Job]:
    """One ``verify`` job per accepted kernel of ``task`` (and pool that passed it), as the gate."""
    forge, ledger = ctx.services.find(FORGE), ctx.services.find(EVIDENCE_LEDGER)
    jobs = ctx.services.find(JOB_SERVICE)
    principal = await gate_principal(ctx)
    if forge is None or ledger is None or jobs is None or principal is None:
        return []
    repo = info.full_name
    withdrawn = {withdrawal_key(w.kernel, w.sha) for w in await WithdrawalStore(ctx.redis).all(repo)}
    submitted: list[Job] = []
    for kernel in await accepted_kernels(forge, ledger, info, task):
        if withdrawal_key(kernel.kernel, kernel.sha) in withdrawn:
            continue
        for pool in sorted(kernel.pools & set(jobs.pools)):
            once = f"{case_id}:{kernel.kernel}@{kernel.sha}:{pool}"
            if not await ctx.redis.hsetnx(jobs_key(repo), once, "submitting"):
                continue
            request = JobRequest(kernel=kernel.kernel, ref=kernel.sha, repo=repo, pool=pool, kind="verify")
            try:
                job = await jobs.submit(principal, request, reverify=case_id)
            except GatewayError as exc:  # e.g. the pool no longer has the task: say so, try next time
                log.warning(
                    "heal %s: cannot re-verify %s@%s on %s: %s",
                    case_id,
                    kernel.kernel,
                    kernel.sha[:10],
                    pool,
                    exc,
                )
                await ctx.redis.hdel(jobs_key(repo), once)
                continue
            await ctx.redis.hset(jobs_key(repo), once, job.id)
            submitted.append(job)
    return submitted


# -- what a finished re-verification does ------------------------------------------------------


def failing_case(job: Job) -> tuple[str, str]:
    """(the regression case the kernel failed, why): the first failing trial that names a case, else
    the case the job re-verified against and the job's own reasons."""
    result = job.result or {}
    for trial in result.get("trials") or []:
        if isinstance(trial, dict) and trial.get("regression") and not trial.get("ok"):
            case = str(trial["regression"])
            flags = ", ".join(str(f) for f in trial.get("flags") or []) or "mismatch"
            detail = f" ({trial['detail']})" if trial.get("detail") else ""
            err = (
                f", max abs error {trial['max_abs_err']:.3g}"
                if isinstance(trial.get("max_abs_err"), float)
                else ""
            )
            return case, f"fails regression case {case}: {flags}{err}{detail}"[:1000]
    reasons = [str(r) for r in result.get("reasons") or []] or [job.error or "failed"]
    return job.reverify or "", f"fails re-verification against {job.reverify}: {'; '.join(reasons)}"[:1000]


async def approvers_of(forge: Forge, job: Job, author: str | None) -> list[str]:
    org, _, name = job.repo.partition("/")
    names: set[str] = set()
    for listed in await forge.list_prs(org, name, state="closed"):
        if listed.merged and listed.merged_head_sha == job.sha:
            pr = await forge.get_pr(org, name, listed.number)  # with its reviews
            names |= {
                r.user
                for r in pr.reviews
                if r.state == "APPROVED" and r.commit_id == job.sha and not r.dismissed
            }
            names.discard(pr.author)
    names.discard(author or "")
    return sorted(names)


async def reverified(ctx: GatewayContext, job: Job) -> Withdrawal | None:
    """A heal job's final state: withdraw the kernel if it failed; the withdrawal, else None."""
    if job.reverify is None or job.state != JobState.failed or job.verdict != "fail":
        return None  # not a heal job, or the kernel held (a pass), or nothing was proven (error)
    submitter = await ctx.principals.get(job.submitter)
    if submitter is None or submitter.kind != PrincipalKind.gate:
        return None  # only the gateway's own jobs heal (defence in depth: no route sets reverify)
    forge = ctx.services.find(FORGE)
    if forge is None:
        return None
    org, _, name = job.repo.partition("/")
    try:
        author = agent_of((await forge.get_commit(org, name, job.sha)).author_email)
    except ForgeError:  # the commit is gone (a gc): withdrawn all the same, its author unknown
        author = None
    case_id, reason = failing_case(job)
    withdrawal = Withdrawal(
        repo=job.repo, task=job.task, kernel=job.kernel, sha=job.sha, reason=reason,
        counterexample=case_id, job=job.id, author=author, at=job.finished or time.time(),
    )  # fmt: skip
    store = WithdrawalStore(ctx.redis)
    if not await store.add(withdrawal):  # withdrawn before (a repeated delivery, or another case)
        first = next(
            (w for w in await store.all(job.repo) if (w.kernel, w.sha) == (job.kernel, job.sha)), None
        )
        if first is None or first.job != job.id:
            return first
        withdrawal = first
    approvers = await approvers_of(forge, job, author)
    await notify(ctx, withdrawal, [n for n in [author, *approvers] if n])
    ledger = ctx.services.find(EVIDENCE_LEDGER)
    records = [job.kernel + "@" + job.sha]
    if ledger is not None:
        records = [
            r.job_id
            for r in await ledger.for_sha(job.repo, job.sha)
            if r.kernel == job.kernel and r.outcome == "pass"
        ] or records
    await record_withdrew(ctx, withdrawal.counterexample, records)
    return withdrawal


async def notify(ctx: GatewayContext, withdrawal: Withdrawal, names: Sequence[str]) -> None:
    """One notice in the gate's channel (``#reviews``) naming the author and the approvers: each gets it
    in their inbox as a ``notice`` from ``gate``, like the gate's merge notices. Deduplicated per
    withdrawal, so a repeated delivery posts nothing."""
    sender = await gate_principal(ctx)
    if sender is None:
        return
    known = [n for n in sorted(set(names)) if n != sender.name and await ctx.principals.get(n) is not None]
    raw = await ctx.redis.get(counterexample_key(withdrawal.counterexample))
    finder = _finder(raw)
    gate = ctx.services.find(REVIEW_GATE)
    text = (
        " ".join(f"@{n}" for n in known)
        + f" withdrawn from the dataset's accepted split: {withdrawal.kernel} at {withdrawal.sha[:10]} "
        f"({withdrawal.repo}) {withdrawal.reason}"
        + (f" (found by {finder})" if finder else "")
        + f". Evidence: job {withdrawal.job}, re-verifying it against regression case "
        f"{withdrawal.counterexample} of task {withdrawal.task}; its record stays, marked withdrawn."
    ).strip()[:2000]
    dedupe = f"withdrawn:{withdrawal.repo}:{withdrawal.kernel}@{withdrawal.sha}"
    await ctx.chat.post(sender, gate.channel if gate else "reviews", text, kind="notice", dedupe=dedupe)


def _finder(raw: str | None) -> str | None:
    if raw is None:
        return None
    try:
        return Counterexample.model_validate_json(raw).finder
    except ValidationError:
        return None


# -- the counterexample's record ------------------------------------------------------------------


async def _update_counterexample(
    ctx: GatewayContext, case_id: str, withdrew: list[str], merged: bool
) -> None:
    raw = await ctx.redis.get(counterexample_key(case_id))
    if raw is None:
        return  # a case committed by hand has no record
    try:
        record = Counterexample.model_validate_json(raw)
    except ValidationError:
        log.warning("counterexample %s: its record does not parse; not updated", case_id)
        return
    record.regression_merged = record.regression_merged or merged
    record.withdrew = sorted(set(record.withdrew) | set(withdrew))
    await ctx.redis.set(counterexample_key(case_id), record.model_dump_json())


async def mark_merged(ctx: GatewayContext, case_id: str) -> None:
    await _update_counterexample(ctx, case_id, [], merged=True)


async def record_withdrew(ctx: GatewayContext, case_id: str, records: list[str]) -> None:
    await _update_counterexample(ctx, case_id, records, merged=True)


async def heal_loop(ctx: GatewayContext, every_s: float = HEAL_EVERY_S) -> None:
    """``heal_sweep`` forever; a failed pass (the forge away) is retried on the next."""
    for _ in rounds():
        try:
            await heal_sweep(ctx)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("the heal's sweep failed; the next one retries")
        await nap(every_s)
