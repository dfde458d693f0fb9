"""Submitting a counterexample: what the REST route and the MCP tool share.

The finder is the principal behind the token (agents only). A submission is checked before it costs a
job: the repo is the dataset repo, the kernel's path names the task, the task exists, the sha is a
commit the forge has with that kernel in it, the kernel there is a target the swarm's policy allows (an
accepted kernel: the head of a PR merged into main with a passing verification at that sha; with
``targets: merged-and-open`` also an open PR's head), and the finder has fewer than
``max_pending_per_agent`` pending. Then the confirming job is queued as the finder's (fair share
applies), kind ``counterexample``, on the first pool the dataset branch's policy verifies on, carrying
the input or the generator. The gateway never runs a generator: the harness does, in the job.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from gateway.client.jobs.kernel_paths import task_of_kernel
from gateway.client.jobs.models import SHA_RE, TASK_RE, CounterexampleJob, JobRequest, check_kernel_path
from gateway.context import GatewayContext
from gateway.counterexamples.models import Counterexample, CounterexampleRequest
from gateway.counterexamples.settings import CounterexampleSettings
from gateway.counterexamples.store import CounterexampleStore, new_counterexample_id
from gateway.counterexamples.targets import list_targets, read_domain
from gateway.errors import CounterexampleError
from gateway.forge.gate.evidence import parse_check_context
from gateway.forge.gate.ledger import EvidenceLedger
from gateway.forge.protocol import Forge
from gateway.jobs.service import JobService
from gateway.principals import Principal, PrincipalKind
from gateway.tasks.definitions import split_repo, task_definition
from kswarm_contracts.counterexample import GENERATOR_MAX_BYTES, CounterexampleStatus


class CounterexampleService:
    def __init__(
        self,
        ctx: GatewayContext,
        settings: CounterexampleSettings,
        jobs: JobService,
        forge: Forge,
        ledger: EvidenceLedger,
    ) -> None:
        self.ctx = ctx
        self.settings = settings
        self.jobs = jobs
        self.forge = forge
        self.ledger = ledger
        self.store = CounterexampleStore(ctx.redis)

    # -- reading ------------------------------------------------------------------------------

    async def get(self, cx_id: str) -> Counterexample:
        cx = await self.store.get(cx_id) if cx_id.startswith("cx") else None
        if cx is None:
            raise CounterexampleError(f"no counterexample {cx_id}", 404)
        return cx

    async def list(
        self,
        repo: str | None = None,
        task: str | None = None,
        status: CounterexampleStatus | None = None,
        limit: int = 100,
    ) -> list[Counterexample]:
        return await self.store.list(repo, task, status, limit)

    async def targets(self, task: str) -> dict[str, Any]:
        """A task's domain (its definition's ``DOMAIN``) and the kernels a counterexample may target."""
        if not TASK_RE.match(task):
            raise CounterexampleError(f"bad task id {task!r}: a-z, 0-9, '_', '.', '-' (max 64)", 422)
        repo = self.settings.dataset_repo
        domain = await read_domain(self.forge, repo, task)  # 404 when there is no such task
        with_open = self.settings.targets == "merged-and-open"
        found = await list_targets(self.forge, self.ledger, repo, task, self.settings.base, with_open)
        return {
            "task": task,
            "repo": repo,
            "policy": self.settings.targets,
            "domain": domain,
            "targets": [t.model_dump() for t in found],
        }

    # -- submitting ---------------------------------------------------------------------------

    async def submit(self, principal: Principal, request: CounterexampleRequest) -> Counterexample:
        if principal.kind != PrincipalKind.agent:
            raise CounterexampleError("counterexamples are submitted by agents (a red-team role)", 403)
        await self.check(request)
        pool = await self.pool()
        cx_id = new_counterexample_id()
        limit = self.settings.max_pending_per_agent
        if not await self.store.reserve(principal.name, cx_id, limit):
            raise CounterexampleError(
                f"you have {limit} counterexample(s) pending (max_pending_per_agent: {limit}); each costs a "
                "job: wait until one is decided (GET /api/counterexamples?status=pending)",
                429,
            )
        generator = request.generator
        cx = Counterexample(
            id=cx_id,
            finder=principal.name,
            task=request.task,
            repo=request.repo,
            kernel=request.kernel,
            sha=request.sha,
            input=request.input,
            generator_sha256=hashlib.sha256(generator.encode()).hexdigest() if generator else None,
            note=request.note,
            created_at=time.time(),
        )
        # Held until the record names its job: the job's outcome waits for it (``outcome.py``).
        await self.store.lock(cx_id)
        try:
            await self.store.save(cx)
            payload = CounterexampleJob(id=cx_id, input=request.input, generator=generator)
            job_request = JobRequest(kernel=request.kernel, ref=request.sha, repo=request.repo, pool=pool)
            try:
                job = await self.jobs.submit(principal, job_request, counterexample=payload)
            except BaseException:
                await self.store.forget(cx)
                raise
            cx.job = job.id
            await self.store.save(cx)
        finally:
            await self.store.unlock(cx_id)
        return cx

    async def check(self, request: CounterexampleRequest) -> None:
        """Every refusal that needs no job, each a 4xx saying what to send instead."""
        if request.repo != self.settings.dataset_repo:
            raise CounterexampleError(
                f"repo {request.repo!r} is not the dataset repo ({self.settings.dataset_repo})", 422
            )
        try:
            check_kernel_path(request.kernel)
            named = task_of_kernel(request.kernel)
        except ValueError as exc:
            raise CounterexampleError(str(exc), 422) from None
        if named != request.task:
            raise CounterexampleError(
                f"kernel {request.kernel} is task {named!r}'s, not {request.task!r}: a kernel is judged "
                "only as the task its directory names",
                422,
            )
        if request.generator is not None and len(request.generator.encode()) > GENERATOR_MAX_BYTES:
            raise CounterexampleError(
                f"generator is {len(request.generator.encode())} bytes; at most {GENERATOR_MAX_BYTES}", 413
            )
        if not SHA_RE.match(request.sha):
            raise CounterexampleError(f"sha {request.sha!r} is not a full commit sha (40 hex digits)", 422)
        await task_definition(self.forge, request.repo, request.task, with_content=False)  # 404 if none
        org, name = split_repo(request.repo)
        if not await self.forge.commit_reachable(org, name, request.sha):
            raise CounterexampleError(f"no commit {request.sha[:12]} in {request.repo}", 404)
        if await self.forge.read_file(org, name, request.sha, request.kernel, max_bytes=1) is None:
            raise CounterexampleError(f"no file {request.kernel} at {request.sha[:12]}", 404)
        await self.check_target(request)

    async def check_target(self, request: CounterexampleRequest) -> None:
        """The kernel at that sha is accepted (a merged head with a passing verification there), or,
        where the policy allows, an open PR's head."""
        org, name = split_repo(request.repo)
        passed = [
            v
            for v in await self.ledger.for_sha(request.repo, request.sha)
            if v.kernel == request.kernel and v.kind == "verify" and v.outcome == "pass"
        ]
        base = self.settings.base
        closed = await self.forge.list_prs(org, name, "closed")
        merged = any(
            p.merged and p.base == base and (p.merged_head_sha or p.head_sha) == request.sha for p in closed
        )
        if merged and passed:
            return
        if self.settings.targets == "merged-and-open":
            opened = await self.forge.list_prs(org, name, "open")
            if any(p.head_sha == request.sha and p.base == base for p in opened):
                return
        what = "accepted kernels (the head of a PR merged into " + base + " with a passing verification)"
        if self.settings.targets == "merged-and-open":
            what += " and open PRs' heads"
        why = "no passing verification there" if merged else "that commit is no merged PR's head"
        raise CounterexampleError(
            f"{request.kernel} at {request.sha[:12]} is not a target: {why}; this swarm attacks {what}", 422
        )

    async def pool(self) -> str:
        """The pool the dataset branch's policy verifies on (its first ``kswarm/verify:<pool>`` check that
        the job runner has), else the first pool that takes verify jobs."""
        org, name = split_repo(self.settings.dataset_repo)
        policy = await self.forge.get_protection(org, name, self.settings.base)
        for context in policy.required_checks if policy is not None else []:
            parsed = parse_check_context(context)
            if parsed is not None and parsed[0] == "verify" and parsed[1] in self.jobs.pools:
                return parsed[1]
        for pool in self.jobs.pools.values():
            if "verify" in pool.rules.kinds:
                return pool.name
        raise CounterexampleError("no pool takes verify jobs: a counterexample cannot be judged here", 503)
