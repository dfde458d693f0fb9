"""``kswarm dataset build``: every verification attempt on the dataset repo, joined with its commit, PR
and reviews, written as JSON Lines and Parquet with a dataset card (schema in docs/dataset.md)."""

from __future__ import annotations

import hashlib
import json
import statistics
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.client import GatewayClient, GatewayTarget
from gateway.dataset.card import render_card, summarize
from gateway.dataset.loop_sources import (
    CounterexampleRecord,
    CounterexampleSource,
    GatewayCounterexampleSource,
    GatewayTimelineSource,
    GatewayWithdrawalSource,
    TimelineSource,
    WithdrawalSource,
)
from gateway.dataset.numbers import loop_numbers
from gateway.dataset.rules import DatasetRules
from gateway.dataset.schema import SCHEMA_VERSION
from gateway.dataset.sources import (
    CostSource,
    ForgeReviewSource,
    GatewayCostSource,
    GatewayJobSource,
    JobRecord,
    JobRecordSource,
    PullInfo,
    booked_models,
    provenance_models,
)
from gateway.dataset.splits import add_timelines, attempt_windows, classify, write_splits, write_table
from gateway.dataset.withdrawals import Withdrawal
from gateway.forge.gate.evidence import EVIDENCE_LEVELS, EvidenceLevel, implied_evidence
from gateway.git.sync import Mirror

VERDICT_REVIEWS = ("APPROVED", "REQUEST_CHANGES")


@dataclass
class DatasetPaths:
    jsonl: Path
    parquet: Path
    card: Path
    summary: Path
    accepted_jsonl: Path | None = None
    accepted_parquet: Path | None = None
    rejected_jsonl: Path | None = None
    rejected_parquet: Path | None = None


@dataclass
class LoopFacts:
    """What the red team and the heal did: the withdrawals, the counterexamples (None: the gateway
    takes none), the timelines of rejected attempts' authors, the spec's ``dataset:`` rules and roles."""

    withdrawals: list[Withdrawal] = field(default_factory=list)
    counterexamples: list[CounterexampleRecord] | None = None
    timelines: TimelineSource | None = None
    rules: DatasetRules = field(default_factory=DatasetRules)
    roles: Mapping[str, str] = field(default_factory=dict)


@dataclass
class BuildReport:
    repo: str
    paths: DatasetPaths
    summary: dict[str, Any]
    rows: list[dict[str, Any]] = field(repr=False, default_factory=list)


def agent_of(email: str | None) -> str | None:
    """The principal behind a commit e-mail ``<name>@<kind>s.<swarm>`` (the forge enforces it)."""
    if not email or "@" not in email:
        return None
    return email.split("@", 1)[0] or None


def link_pulls(pulls: list[PullInfo], mirror: Mirror) -> dict[str, PullInfo]:
    """Commit -> the PR it belongs to: a PR's head wins over a PR that merely contains the commit.

    A commit a force-push removed from every branch is still linked through the reviews pinned to it
    (a REQUEST_CHANGES on the rejected attempt is exactly such a review)."""
    owner: dict[str, PullInfo] = {}
    for pr in sorted(pulls, key=lambda p: p.number):
        for sha in mirror.commits_between(pr.merge_base or pr.base_sha, pr.head_sha):
            current = owner.get(sha)
            if current is None or current.head_sha != sha:
                owner[sha] = pr
        for review in pr.reviews:
            if review.commit_id:
                owner.setdefault(review.commit_id, pr)
    return owner


def _trials(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "index": t.get("index"),
            "shape": json.dumps(t.get("shape") or {}, sort_keys=True),
            "dtype": t.get("dtype"),
            "seed": t.get("seed"),
            "ok": bool(t.get("ok")),
            "max_abs_err": t.get("max_abs_err"),
            "max_rel_err": t.get("max_rel_err"),
            "flags": [str(f) for f in t.get("flags") or []],
        }
        for t in result.get("trials") or []
    ]


def _timings(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "shape": json.dumps(t.get("shape") or {}, sort_keys=True),
            "dtype": t.get("dtype"),
            "candidate_median_ms": (t.get("candidate") or {}).get("median_ms"),
            "baseline_median_ms": (t.get("baseline") or {}).get("median_ms"),
            "speedup": t.get("speedup"),
            "suspicious": bool(t.get("suspicious")),
        }
        for t in result.get("timings") or []
    ]


def evidence_of(job: JobRecord, verdict: str | None) -> EvidenceLevel:
    """The gateway's level for the job (``Job.evidence``); an export made before levels existed reads as
    its verdict implies on a cpu pool (the weakest pass): the build never takes the harness record's own
    claim, which the gateway capped by the pool that ran it."""
    if job.evidence in EVIDENCE_LEVELS:
        return job.evidence
    return implied_evidence(job.state, verdict, on_device=False)


def make_row(
    job: JobRecord, pr: PullInfo | None, mirror: Mirror, models: Mapping[str, str], main_sha: str | None
) -> dict[str, Any]:
    result: dict[str, Any] = job.result or {}
    code = mirror.file_at(job.sha, job.kernel)
    digest = hashlib.sha256(code).hexdigest() if code is not None else result.get("candidate_sha256")
    # The forge only accepts commits authored by their pusher; when the commit is gone from every
    # branch (force-pushed away), the job's submitter — the one who pushed it — is the author.
    author = agent_of(mirror.author_email(job.sha)) or (job.submitter if code is None else None)
    on_main = False
    if main_sha and code is not None:
        merged = mirror.file_at(main_sha, job.kernel)
        on_main = merged is not None and hashlib.sha256(merged).hexdigest() == digest
    not_author = {author, pr.author if pr else None}
    reviews = pr.reviews if pr else []
    reviewers = sorted({r.user for r in reviews if r.state in VERDICT_REVIEWS} - not_author)
    approvers = sorted(
        {r.user for r in reviews if r.state == "APPROVED" and r.commit_id == job.sha and not r.dismissed}
        - not_author
    )
    verdict = job.verdict or result.get("verdict")
    merged_head = pr is not None and pr.merged and pr.head_sha == job.sha
    env = result.get("environment") or None
    trials = _trials(result)
    timings = _timings(result)
    speedups = [t["speedup"] for t in timings if t["speedup"] is not None]
    reasons = [str(r) for r in result.get("reasons") or []] or ([job.error] if job.error else [])
    return {
        "record_id": job.id,
        "schema_version": SCHEMA_VERSION,
        "task": job.task,
        "repo": job.repo,
        "commit": job.sha,
        "kernel_path": job.kernel,
        "kernel_code": code.decode(errors="replace") if code is not None else None,
        "kernel_sha256": digest,
        "author": author,
        "author_model": models.get(author) if author else None,
        "submitter": job.submitter,
        "reproduction": job.reproduce_pr is not None,
        "reviewers": reviewers,
        "approvers": approvers,
        "reviews": [
            {"user": r.user, "state": r.state, "commit_id": r.commit_id, "on_head": r.commit_id == job.sha}
            for r in reviews
        ],
        "pr_number": pr.number if pr else None,
        "pr_title": pr.title if pr else None,
        "pr_state": ("merged" if pr.merged else pr.state) if pr else None,
        "merge_commit": pr.merge_commit if pr and pr.merged else None,
        "accepted": verdict == "pass" and merged_head,
        "on_main": on_main,
        "pool": job.pool,
        "device": (env or {}).get("device"),
        "device_name": (env or {}).get("device_name"),
        "node": job.node,
        "devices": list(job.allocated),
        "environment": {k: (str(v) if v is not None else None) for k, v in env.items()} if env else None,
        "kind": job.kind,
        "state": job.state,
        "verdict": verdict,
        "passed": verdict == "pass",
        "evidence": evidence_of(job, verdict),
        "flags": [str(f) for f in result.get("flags") or []],
        "reasons": reasons,
        "needs_review": bool(result.get("needs_review")),
        "trials": trials,
        "n_trials": len(trials),
        "n_trials_passed": sum(t["ok"] for t in trials),
        "timings": timings,
        "speedup": statistics.median(speedups) if speedups else None,
        "harness_s": (result.get("durations") or {}).get("total_s"),
        "job_s": (job.finished - job.started) if job.finished and job.started else None,
        "submitted_at": job.submitted,
        "finished_at": job.finished,
        "refines": None,
        "refines_commit": None,
        "cost_tokens": None,
        "cost_usd": None,
    }


def add_lineage(rows: list[dict[str, Any]]) -> None:
    """A record refines the latest earlier attempt by the same author at the same task on another commit."""
    history: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: (r["submitted_at"] or 0.0, r["record_id"])):
        key = (row["task"], row["author"])
        earlier = [r for r in history.get(key, []) if r["commit"] != row["commit"]]
        if earlier and row["author"] is not None:
            row["refines"] = earlier[-1]["record_id"]
            row["refines_commit"] = earlier[-1]["commit"]
        history.setdefault(key, []).append(row)


COST_LOOKBACK_S = 7 * 86_400  # the monitor keeps per-minute history this long


def add_cost(rows: list[dict[str, Any]], cost: CostSource | None) -> None:
    """``cost_tokens``/``cost_usd``: what the author spent on the row's task (while holding its claim)
    from its previous attempt at the task to this one's submission (the first: the retention before)."""
    if cost is None:
        return
    for row, since in attempt_windows(rows, COST_LOOKBACK_S):
        got = cost.window(row["task"], row["author"], since, row["submitted_at"])
        if got is None:
            return  # no monitor: no cost anywhere
        row["cost_tokens"] = int(got.tokens)
        row["cost_usd"] = round(got.cost_usd, 6)


def build_rows(
    repo: str,
    jobs: list[JobRecord],
    pulls: list[PullInfo],
    mirror: Mirror,
    models: Mapping[str, str],
    main_branch: str = "main",
    cost: CostSource | None = None,
    loop: LoopFacts | None = None,
) -> list[dict[str, Any]]:
    loop = loop or LoopFacts()
    owner = link_pulls([p for p in pulls if p.base_ref == main_branch], mirror)
    main_sha = mirror.branch_sha(main_branch)
    mine = [j for j in jobs if j.repo == repo]
    rows = [make_row(j, owner.get(j.sha), mirror, models, main_sha) for j in mine]
    add_lineage(rows)
    add_cost(rows, cost)
    classify(rows, {j.id: j for j in mine}, loop.withdrawals, loop.counterexamples)
    add_timelines(rows, loop.timelines, loop.rules, COST_LOOKBACK_S)
    rows.sort(key=lambda r: (r["submitted_at"] or 0.0, r["record_id"]))
    return rows


def write_dataset(
    rows: list[dict[str, Any]],
    out: Path,
    repo: str,
    cost_report: dict[str, Any] | None = None,
    models: Mapping[str, str] | None = None,
    loop: LoopFacts | None = None,
) -> tuple[DatasetPaths, dict[str, Any]]:
    """``data/records.*`` (every row), ``data/accepted.*`` and ``data/rejected.*`` (the splits),
    ``summary.json`` and the card. Rows from before statuses (no ``status``) are classified here."""
    loop = loop or LoopFacts()
    if any("status" not in r for r in rows):
        classify(rows, {}, loop.withdrawals, loop.counterexamples)
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    paths = DatasetPaths(
        jsonl=data / "records.jsonl",
        parquet=data / "records.parquet",
        card=out / "README.md",
        summary=out / "summary.json",
    )
    write_table(rows, paths.jsonl, paths.parquet)
    splits = write_splits(rows, data)
    paths.accepted_jsonl, paths.accepted_parquet = splits["accepted"]
    paths.rejected_jsonl, paths.rejected_parquet = splits["rejected"]
    numbers = loop_numbers(rows, loop.withdrawals, loop.counterexamples, cost_report, loop.roles)
    summary = summarize(rows, repo, cost_report, models, numbers)
    paths.summary.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    paths.card.write_text(render_card(summary))
    return paths, summary


def build_dataset(
    url: str,
    token: str,
    repo: str,
    out: Path,
    models: Mapping[str, str] | None = None,
    job_source: JobRecordSource | None = None,
    mirror_dir: Path | None = None,
    rules: DatasetRules | None = None,
    roles: Mapping[str, str] | None = None,
) -> BuildReport:
    """``build_dataset_at`` the gateway at ``url``, as ``token``'s principal."""
    target = GatewayTarget(token=token, url=url, timeout=120)
    return build_dataset_at(target, repo, out, models, job_source, mirror_dir, rules=rules, roles=roles)


def build_dataset_at(
    gateway: GatewayTarget,
    repo: str,
    out: Path,
    models: Mapping[str, str] | None = None,
    job_source: JobRecordSource | None = None,
    mirror_dir: Path | None = None,
    cost_source: CostSource | None = None,
    withdrawal_source: WithdrawalSource | None = None,
    counterexample_source: CounterexampleSource | None = None,
    timeline_source: TimelineSource | None = None,
    rules: DatasetRules | None = None,
    roles: Mapping[str, str] | None = None,
) -> BuildReport:
    """Fetch everything from the gateway (as its target's principal) and write the dataset to ``out``.
    ``rules`` and ``roles`` are the swarm spec's (``dataset:``, each agent's ``role``)."""
    rules = rules or DatasetRules()
    with GatewayClient(gateway) as client:
        forge = ForgeReviewSource(client)
        info = forge.repo(repo)
        pulls = forge.pulls(repo)
        jobs = (job_source or GatewayJobSource(client)).job_records(repo)
        cost = cost_source or GatewayCostSource(client)
        models = provenance_models(models or {}, booked_models(client))
        loop = LoopFacts(
            withdrawals=(withdrawal_source or GatewayWithdrawalSource(client)).withdrawals(repo),
            counterexamples=(counterexample_source or GatewayCounterexampleSource(client)).counterexamples(
                repo
            ),
            timelines=(timeline_source or GatewayTimelineSource(client))
            if rules.rejected_timelines
            else None,
            rules=rules,
            roles=dict(roles or {}),
        )
        with tempfile.TemporaryDirectory(prefix="kswarm-dataset-") as tmp:
            mirror = Mirror.fetch(
                info["clone_url"], gateway.token or "", mirror_dir or Path(tmp) / "mirror.git"
            )
            try:
                branch = info.get("default_branch") or "main"
                rows = build_rows(repo, jobs, pulls, mirror, models, branch, cost, loop)
            finally:
                mirror.close()
        cost_report = cost.report()
    paths, summary = write_dataset(rows, out, repo, cost_report, models, loop)
    return BuildReport(repo=repo, paths=paths, summary=summary, rows=rows)
