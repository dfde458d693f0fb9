"""What follows a job's final state, done by the gateway in one place: evidence, then the notice.

When a job reaches a final state (a worker's ``finish``, a dead letter, a cancellation), the queue's
script that ends it also lists it in ``unreported``. ``JobOutcomes.deliver`` then records the job's
verification in the forge's evidence ledger (the gate publishes the commit statuses from it and
re-decides the PRs on that sha) and sends the submitter's notice, and only then takes the job off the
list. ``finish`` delivers at once; the reclaim loop delivers whatever a crash left listed. Each step is
idempotent (the evidence is keyed by job id; the notice is a chat post with a dedupe key, checked and
set in the post's own script), so a delivery that is repeated after a crash changes nothing. A worker
therefore makes exactly one call to finish a job: if it dies right after it, nothing is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from gateway.client.jobs.models import Job, JobState
from gateway.context import GatewayContext
from gateway.forge.gate.evidence import Verification
from gateway.forge.gate.ledger import EvidenceLedger
from gateway.jobs.queue import JobQueue
from gateway.principals import Principal
from gateway.services import EVIDENCE_LEDGER

log = logging.getLogger("kswarm.jobs")
# Kinds whose verdict is evidence about the kernel for the gate; a counterexample job judges one input
# (the kernel's verdict on it), which proves nothing the gate merges on.
LEDGER_KINDS = frozenset({"verify", "bench"})
FinalHook = Callable[[Job], Awaitable[None]]
AfterFinal = Callable[[Job], Awaitable[object]]
RETRY_AFTER_S = 5.0  # a listed job younger than this is probably being delivered by its finish call


def verification_of(job: Job) -> Verification:
    return Verification(
        job_id=job.id,
        repo=job.repo,
        sha=job.sha,
        kernel=job.kernel,
        task=job.task,
        pool=job.pool,
        kind=job.kind,
        submitter=job.submitter,
        state=job.state.value,
        verdict=job.verdict,
        error=job.error,
        reproduce_pr=job.reproduce_pr,
        evidence=job.evidence if job.terminal else None,  # the gateway's own level (JobService.finish)
        ts=job.finished or job.submitted,
    )


def notice_text(job: Job) -> str:
    text = f"job {job.id} ({job.task}, {job.kernel} @ {job.sha[:10]}, pool {job.pool}): {job.state.value}" + (
        f" - {job.error}" if job.error else ""
    )
    return text[:2000]


class JobOutcomes:
    def __init__(self, ctx: GatewayContext, queue: JobQueue) -> None:
        self.ctx = ctx
        self.queue = queue
        # What follows a final state of a kind other than verify/bench, instead of the plain notice:
        # set by the component that submits such jobs (``counterexample``: gateway/counterexamples/).
        # A hook is idempotent and raises to be retried, like the rest of a delivery.
        self.final_hooks: dict[str, FinalHook] = {}
        # What runs after every final state's delivery, whatever the kind (the heal: a re-verification
        # that failed withdraws its kernel, gateway/counterexamples/heal.py); idempotent, raises to retry.
        self.after_final: list[AfterFinal] = []

    @property
    def ledger(self) -> EvidenceLedger | None:
        return self.ctx.services.find(EVIDENCE_LEDGER)

    async def submitted(self, job: Job) -> None:
        """A queued job is pending evidence for its kernel (``pr why`` shows it as running)."""
        if self.ledger is not None and job.kind in LEDGER_KINDS:
            await self.ledger.record(verification_of(job))

    async def refused(self, job: Job) -> None:
        if self.ledger is not None and job.kind in LEDGER_KINDS:
            await self.ledger.forget(job.repo, job.sha, job.id)

    async def deliver(self, job_id: str) -> bool:
        """Evidence and notice of one finished job, then off the unreported list; False to retry."""
        job = await self.queue.get(job_id)
        if job is None or not job.terminal:
            await self.queue.mark_reported(job_id)
            return True
        try:
            if self.ledger is not None and job.kind in LEDGER_KINDS:
                await self.ledger.record(verification_of(job))
            hook = self.final_hooks.get(job.kind)
            await (hook(job) if hook is not None else self._notify(job))
            for after in self.after_final:
                await after(job)
        except Exception:  # Redis or chat trouble: the reclaim loop retries it
            log.exception("job %s: delivering its outcome failed; will retry", job_id)
            return False
        await self.queue.mark_reported(job_id)
        return True

    async def deliver_pending(self) -> None:
        for job_id in await self.queue.unreported(older_than_s=RETRY_AFTER_S):
            await self.deliver(job_id)

    async def _sender(self, job: Job) -> Principal | None:
        name = (job.worker or "").partition("/")[0]
        return await self.ctx.principals.get(name) if name else None

    async def _notify(self, job: Job) -> None:
        """DM the submitter once per job (from the worker principal that ran it): the post carries a
        dedupe key, so a delivery repeated after a crash finds it made and writes nothing."""
        if job.state == JobState.cancelled and not job.attempts:
            return  # cancelled before it ran: the submitter (or an operator) did it and knows
        sender = await self._sender(job)
        if sender is None or sender.name == job.submitter:
            return
        await self.ctx.chat.post_dm(sender, job.submitter, notice_text(job), dedupe=f"job-notice:{job.id}")
