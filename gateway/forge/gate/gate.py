"""The review gate: the ``gate`` principal's merge bot.

It consumes the forge event stream (reviews, statuses, pushes, verification records, protection
changes) with a Redis consumer group, re-evaluates the affected PRs and merges those whose every rule
holds. Verification is bound to each changed kernel: the gate classifies the PR's changed files
(``kernels.py``), reads the head's verification records (``ledger.py``), decides per kernel
(``coverage.py``: each changed kernel also needs the evidence level its policy asks for, ``min_evidence``)
and publishes the per-kernel and aggregate ``kswarm/`` statuses itself, each saying the level its passes
prove. Merges are
one per base at a time (a Redis lock), with the head sha rechecked under the lock and passed to
the forge so that a push in between makes the merge fail instead of merging unreviewed code. Every
decision goes to an audit list per PR; merges and new hard blocks are announced in ``#reviews``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from gateway.cancellation import nap, rounds
from gateway.chat import ChatService
from gateway.errors import ForgeError
from gateway.forge import keys
from gateway.forge.gate.coverage import STATUS_OF_COVERAGE
from gateway.forge.gate.coverage import coverage as kernel_coverage
from gateway.forge.gate.evidence import kernel_context, parse_check_context
from gateway.forge.gate.kernels import PRChanges, classify
from gateway.forge.gate.ledger import EvidenceLedger
from gateway.forge.gate.policy import GateDecision, ReviewPolicy, evaluate
from gateway.forge.gate.regressions import RegressionSource, admit_regressions
from gateway.forge.gate.rules import Reason, short
from gateway.forge.gate.vouched import OperatorHeads
from gateway.forge.locks import branch_lock
from gateway.forge.models import ChangedFile, PullRequest
from gateway.forge.protocol import Forge
from gateway.metrics import GatewayMetrics
from gateway.principals import Principal, PrincipalKind, PrincipalStore
from gateway.redis_compat import stream_gone, xautoclaim
from gateway.redis_facade import StrRedis

log = logging.getLogger("kswarm.forge.gate")
AUDIT_MAX = 500
FILES_CACHE = 512  # PRs whose changed-file lists are kept (keyed by repo, base sha, head sha)
STATUS_DESCRIPTION_MAX = 140
CLAIM_IDLE_MS = 60_000


class ReviewGate:
    def __init__(
        self,
        forge: Forge,
        redis: StrRedis,
        chat: ChatService,
        principals: PrincipalStore,
        ledger: EvidenceLedger,
        *,
        sweep_s: float = 30.0,
        metrics: GatewayMetrics | None = None,
        lock_ttl_s: float = 60.0,
        channel: str = "reviews",
    ) -> None:
        self.forge = forge
        self.redis = redis
        self.chat = chat
        self.principals = principals
        self.ledger = ledger
        self.sweep_s = sweep_s
        self.metrics = metrics
        self.lock_ttl_ms = int(lock_ttl_s * 1000)
        self.channel = channel
        self.consumer = f"gate-{uuid.uuid4().hex[:12]}"
        self._principal: Principal | None = None
        self.operator_heads = OperatorHeads(redis)
        self._files: dict[tuple[str, str, str], tuple[list[ChangedFile], set[str]]] = {}
        # Confirmed counterexamples' regression cases (set by the counterexample component); without
        # it a PR's regression files stay blocked as trusted paths (``regressions.py``).
        self.regressions: RegressionSource | None = None

    async def principal(self) -> Principal:
        if self._principal is None:
            self._principal, _ = await self.principals.ensure("gate", PrincipalKind.gate)
        return self._principal

    # -- evaluation -------------------------------------------------------------------------

    async def decide(self, org: str, repo: str, number: int) -> tuple[PullRequest, GateDecision]:
        pr = await self.forge.get_pr(org, repo, number)
        policy = await self.forge.get_protection(org, repo, pr.base) or ReviewPolicy()
        everyone = await self.principals.list()
        trusted = {p.name for p in everyone if p.kind == PrincipalKind.worker}
        trusted.add((await self.principal()).name)
        # Humans: operator principals, from the token store (a review's user is the reviewing token's).
        operators = {p.name for p in everyone if p.kind == PrincipalKind.operator and not p.disabled}
        if not pr.head_sha or not pr.base_sha:
            return pr, evaluate(pr, policy, status_setters=trusted, operators=operators)
        vouched = await self.operator_head(pr, operators)
        changes = await self.changes(pr, policy, operator_author=vouched)
        if policy.dataset and not vouched:
            await admit_regressions(self.forge, pr, changes, self.regressions)
        if pr.author in operators and not vouched:
            for blocked in changes.blocked:  # the operator's own PR: say why it is not exempt
                blocked.why += (
                    f" (this head, {short(pr.head_sha)}, is not one kswarm committed for an operator: "
                    "trusted files change through `kswarm tasks add`)"
                )
        evidence = await self.ledger.for_sha(pr.full_name, pr.head_sha)
        decision = evaluate(
            pr, policy, changes=changes, evidence=evidence, status_setters=trusted, operators=operators
        )
        if pr.state != "open":  # merged or closed: still show what verified its head
            decision.kernels = kernel_coverage(
                pr.head_sha, changes.candidates, evidence, policy.required_checks, policy.min_evidence
            )
        return pr, decision

    async def operator_head(self, pr: PullRequest, operators: set[str]) -> bool:
        """Whether the PR may change trusted paths: an operator's PR whose head kswarm committed for an
        operator (``gateway/forge/gate/vouched.py``): who opened it is not enough, as anyone who can push
        to its branch (any writer, in Gitea) could have moved its head since."""
        if pr.author not in operators or not pr.head_sha or pr.state != "open":
            return False
        return await self.operator_heads.vouches(pr.full_name, pr.head_sha, pr.head, pr.base)

    async def changes(
        self, pr: PullRequest, policy: ReviewPolicy, operator_author: bool = False
    ) -> PRChanges:
        """The PR's changed files, classified; the file list is cached by (repo, base, head) because
        it depends on nothing else (a push or a moved base changes the key)."""
        key = (pr.full_name, pr.base_sha or "", pr.head_sha or "")
        cached = self._files.get(key)
        if cached is None:
            files = await self.forge.pr_files(pr.org, pr.repo, pr.number)
            base_side: list[ChangedFile] = []
            if pr.state == "open" and pr.head_sha and pr.base_sha:
                base_side = await self.forge.compare_files(pr.org, pr.repo, pr.head_sha, pr.base_sha)
            cached = self._files[key] = (files, {f.path for f in base_side})
            while len(self._files) > FILES_CACHE:
                self._files.pop(next(iter(self._files)))
        files, base_changed = cached
        return classify(
            files,
            author=pr.author,
            dataset=policy.dataset,
            trusted_paths=policy.trusted_paths,
            base_changed=base_changed,
            base=pr.base,
            operator_author=operator_author,
        )

    async def publish(self, pr: PullRequest, decision: GateDecision) -> None:
        """Set the head's kswarm statuses from the decision: one per changed kernel and required check
        (``kswarm/verify:cpu/<task>/<file>``) and the aggregate required check (``kswarm/verify:cpu``),
        so that forge UIs and the forge's own merge check see what the gate sees. Only changes are
        written; a failure to write is logged and retried on the next decision."""
        head = decision.head_sha
        if pr.state != "open" or not head:
            return
        wanted: dict[str, tuple[str, str]] = {}
        for kernel in decision.kernels:
            for check in kernel.checks:
                kind, pool = parse_check_context(check.context) or ("verify", "?")
                context = kernel_context(kind, pool, kernel.path)
                # The short form leads with what the pass proves ("pass (cpu-screened): job …"), so
                # the level survives the description's length limit; pr why has the long message.
                wanted[context] = (STATUS_OF_COVERAGE[check.state], check.summary or check.message)
        contexts = {c.context for k in decision.kernels for c in k.checks}
        policy = await self.forge.get_protection(pr.org, pr.repo, pr.base) or ReviewPolicy()
        contexts |= {c for c in policy.required_checks if parse_check_context(c)}
        for context in contexts:
            wanted[context] = decision.aggregate(context)
        current = {s.context: (s.state, s.description) for s in pr.statuses if s.sha == head}
        gate = await self.principal()
        for context, (state, description) in sorted(wanted.items()):
            description = description[:STATUS_DESCRIPTION_MAX]
            if current.get(context) == (state, description):
                continue
            try:
                await self.forge.set_status(gate.name, pr.org, pr.repo, head, state, context, description)
            except ForgeError as exc:
                log.warning("gate: status %s on %s: %s", context, short(head), exc)

    async def audit(self, repo: str, number: int, limit: int = 50) -> list[dict[str, Any]]:
        raw = await self.redis.lrange(keys.audit(repo, number), -limit, -1)
        return [json.loads(r) for r in raw]

    async def record(
        self, pr: PullRequest, decision: GateDecision, action: str, cause: str, **extra: Any
    ) -> None:
        """Append a decision to the PR's audit list; an identical repeat only bumps the last entry's count
        (and says when, and what caused it: ``last_ts``, ``last_cause``)."""
        if self.metrics is not None:
            self.metrics.gate_decisions.labels(action=action).inc()
        entry = {
            "ts": time.time(),
            "action": action,
            "cause": cause,
            "head_sha": decision.head_sha,
            "mergeable": decision.mergeable,
            "reasons": [r.model_dump() for r in decision.reasons],
            "approvals": decision.approvals,
            "human_approvals": decision.human_approvals,
            "notes": decision.notes,
            **extra,
        }
        key = keys.audit(pr.full_name, pr.number)
        last_raw = await self.redis.lindex(key, -1)
        if last_raw:
            last = json.loads(last_raw)
            same = ("action", "head_sha", "reasons", "approvals")
            if all(last.get(k) == entry.get(k) for k in same):
                last["repeats"] = last.get("repeats", 1) + 1
                last["last_ts"] = entry["ts"]
                last["last_cause"] = cause
                await self.redis.lset(key, -1, json.dumps(last))
                return
        await self.redis.rpush(key, json.dumps(entry))
        await self.redis.ltrim(key, -AUDIT_MAX, -1)

    # -- acting -----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def base_lock(self, repo: str, base: str, wait_s: float = 30.0) -> AsyncIterator[None]:
        """Serialise merges (and seeding) into one base across gate instances."""
        async with branch_lock(self.redis, repo, base, self.lock_ttl_ms, wait_s):
            yield

    async def consider(self, org: str, repo: str, number: int, cause: str = "event") -> GateDecision:
        """Evaluate one PR and merge it when every rule holds."""
        pr, decision = await self.decide(org, repo, number)
        if pr.state != "open":
            if pr.head_sha:  # a closed (or merged) task PR's head vouches for nothing any more
                await self.operator_heads.forget(pr.full_name, pr.head_sha)
            return decision
        await self.publish(pr, decision)
        if not decision.mergeable:
            await self.record(pr, decision, "blocked", cause)
            await self.announce_block(pr, decision)
            return decision
        async with self.base_lock(pr.full_name, pr.base):
            pr, decision = await self.decide(org, repo, number)  # recheck: the base or head may have moved
            if pr.state != "open":
                return decision
            if not decision.mergeable or decision.head_sha is None:
                await self.record(pr, decision, "blocked", cause)
                await self.announce_block(pr, decision)
                return decision
            await self.publish(pr, decision)  # the forge's own merge check reads the aggregate
            gate = await self.principal()
            try:
                result = await self.forge.merge(gate.name, org, repo, number, decision.head_sha)
            except ForgeError as exc:
                decision.mergeable = False
                decision.reasons.append(Reason(code="merge-failed", message=f"merge refused: {exc}"))
                await self.record(pr, decision, "merge-failed", cause, error=str(exc), status=exc.status)
                return decision
        await self.record(pr, decision, "merged", cause, merge_sha=result.merge_sha)
        if decision.head_sha:  # a merged task PR's head vouches for nothing any more
            await self.operator_heads.forget(pr.full_name, decision.head_sha)
        approvers = ", ".join("@" + a for a in [*decision.approvals, *decision.human_approvals])
        await self.announce(
            f'@{pr.author} {pr.ref} "{pr.title}" merged into {pr.base} as {short(result.merge_sha)} '
            f"(head {short(decision.head_sha)}, approved by {approvers or 'nobody (none required)'})."
        )
        return decision

    async def announce_block(self, pr: PullRequest, decision: GateDecision) -> None:
        """Announce hard blocks once per distinct set of reasons (waiting is not announced)."""
        hard = [r.message for r in decision.reasons if r.blocking]
        fingerprint = json.dumps([decision.head_sha, hard]) if hard else ""
        key = keys.announced(pr.full_name, pr.number)
        previous = await self.redis.getset(key, fingerprint)
        if not hard or previous == fingerprint:
            return
        await self.announce(f'@{pr.author} {pr.ref} "{pr.title}" is blocked: {"; ".join(hard)}.')

    async def announce(self, text: str) -> None:
        try:
            await self.chat.notify(await self.principal(), self.channel, text)
        except Exception:  # an announcement must never break the gate
            log.exception("gate announcement failed")

    # -- the event loop ---------------------------------------------------------------------

    async def affected(self, fields: dict[str, str]) -> list[tuple[str, str, int]]:
        """(org, repo, number) of open PRs an event may change the verdict of."""
        org, _, repo = fields.get("repo", "").partition("/")
        if not org or not repo:
            return []
        kind = fields.get("type", "")
        if kind == "merged":
            return []
        if kind == "status" and fields.get("actor") == (await self.principal()).name:
            return []  # the gate's own published statuses change none of its decisions
        if fields.get("pr"):
            return [(org, repo, int(fields["pr"]))]
        prs = await self.forge.list_prs(org, repo, "open")
        if kind == "push":
            branch = fields.get("ref", "").removeprefix("refs/heads/")
            prs = [p for p in prs if branch in (p.head, p.base)]
        elif kind in ("status", "verification"):
            prs = [p for p in prs if p.head_sha == fields.get("sha")]
        return [(org, repo, p.number) for p in prs]

    async def handle(self, fields: dict[str, str]) -> None:
        for org, repo, number in await self.affected(fields):
            try:
                await self.consider(org, repo, number, cause=fields.get("type", "event"))
            except ForgeError as exc:
                log.warning("gate: %s/%s#%s: %s", org, repo, number, exc)

    async def sweep(self) -> None:
        """Re-evaluate every open PR: the safety net for lost events (and the only source with Gitea)."""
        for info in await self.forge.list_repos():
            await self.handle({"type": "sweep", "repo": info.full_name})

    async def ensure_group(self) -> None:
        try:
            await self.redis.xgroup_create(keys.EVENTS, keys.GATE_GROUP, id="0", mkstream=True)
        except Exception as exc:  # BUSYGROUP: it exists already
            if "BUSYGROUP" not in str(exc):
                raise

    async def run(self) -> None:
        await self.principal()
        await self.ensure_group()
        next_sweep = time.monotonic()
        for _ in rounds():
            try:
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + self.sweep_s
                    await self.sweep()
                _, claimed, _ = await xautoclaim(
                    self.redis, keys.EVENTS, keys.GATE_GROUP, self.consumer, CLAIM_IDLE_MS, count=50
                )
                reply = await self.redis.xreadgroup(
                    keys.GATE_GROUP, self.consumer, {keys.EVENTS: ">"}, count=50, block=1000
                )
                entries = claimed + (reply[0][1] if reply else [])
                for entry_id, fields in entries:
                    try:
                        await self.handle(fields)
                    except Exception:
                        log.exception("gate: event %s failed", entry_id)
                    await self.redis.xack(keys.EVENTS, keys.GATE_GROUP, entry_id)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if stream_gone(exc):
                    log.warning("gate: events stream gone (%s); recreating the consumer group", exc)
                    await self.ensure_group()
                    continue
                log.exception("gate loop error")
                await nap(1)
