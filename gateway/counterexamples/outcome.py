"""What follows a counterexample job's final state (``JobOutcomes.final_hooks["counterexample"]``).

The job's result carries the harness's ``counterexample`` outcome. The record takes its status,
reasons and outcome (``confirmed`` needs the kernel's verdict ``fail`` on the judged input, and the
input; anything else that is not a refusal is an ``error``), the finder gets one notice, and a confirmed
counterexample gets its regression PR (``regression.py``). Delivery is at least once, so every step is
idempotent: a decided record is not decided again, the PR is reused, the notice carries a dedupe key.
"""

from __future__ import annotations

import logging
import time

from pydantic import ValidationError

from gateway.client.jobs.models import Job, JobState
from gateway.context import GatewayContext
from gateway.counterexamples.models import Counterexample
from gateway.counterexamples.regression import open_regression_pr
from gateway.counterexamples.settings import CounterexampleSettings
from gateway.counterexamples.store import CounterexampleStore
from gateway.forge.protocol import Forge
from gateway.jobs.workers import NOTICE_SENDER
from gateway.principals import PrincipalKind
from kswarm_contracts.counterexample import CounterexampleOutcome

log = logging.getLogger("kswarm.counterexamples")


class OutcomeBusy(RuntimeError):
    """The record is being written by its submission or another delivery: retried by the job runner."""


def decide(cx: Counterexample, job: Job) -> Counterexample:
    """The record after ``job`` (its final state and result's outcome)."""
    raw = (job.result or {}).get("counterexample")
    outcome: CounterexampleOutcome | None = None
    if raw is not None:
        try:
            outcome = CounterexampleOutcome.model_validate(raw)
        except ValidationError as exc:
            reason = f"the job's counterexample outcome is malformed: {exc.errors()[0]['msg']}"
            return cx.model_copy(update=_decided("error", [reason], None, job))
    if outcome is None:
        why = job.error or f"the job ended {job.state.value} without judging the counterexample"
        return cx.model_copy(update=_decided("error", [why], None, job))
    if outcome.status == "confirmed":
        if job.state != JobState.failed or job.verdict != "fail" or outcome.input is None:
            why = (
                f"the outcome says confirmed but the kernel's verdict is {job.verdict or job.state.value}"
                if outcome.input is not None
                else "the outcome says confirmed but names no input"
            )
            return cx.model_copy(update=_decided("error", [why], outcome, job))
        update = _decided("confirmed", outcome.reasons, outcome, job)
        update["input"] = outcome.input
        return cx.model_copy(update=update)
    reasons = outcome.reasons or [f"the harness {outcome.status} it without a reason"]
    return cx.model_copy(update=_decided(outcome.status, reasons, outcome, job))


def _decided(
    status: str, reasons: list[str], outcome: CounterexampleOutcome | None, job: Job
) -> dict[str, object]:
    return {
        "status": status,
        "reasons": [r[:1000] for r in reasons[:20]],
        "outcome": outcome,
        "job": job.id,
        "decided_at": time.time(),
    }


def notice(cx: Counterexample) -> str:
    what = f"counterexample {cx.id} ({cx.task}, {cx.kernel} @ {cx.sha[:10]}, job {cx.job})"
    if cx.status == "confirmed":
        pr = (
            f": regression PR #{cx.regression_pr} opened for you; it needs a reviewer's approval"
            if (cx.regression_pr)
            else ""
        )
        return f"{what}: confirmed{pr}."[:2000]
    return f"{what}: {cx.status}: {'; '.join(cx.reasons) or 'no reason given'}"[:2000]


class CounterexampleOutcomes:
    def __init__(
        self, ctx: GatewayContext, settings: CounterexampleSettings, forge: Forge, store: CounterexampleStore
    ) -> None:
        self.ctx = ctx
        self.settings = settings
        self.forge = forge
        self.store = store

    async def job_finished(self, job: Job) -> None:
        if job.counterexample is None:
            return
        cx_id = job.counterexample.id
        if not await self.store.lock(cx_id):
            raise OutcomeBusy(f"counterexample {cx_id} is being written; its outcome is retried")
        try:
            cx = await self.store.get(cx_id)
            if cx is None or cx.finder != job.submitter:
                log.warning("job %s judges counterexample %s, which has no record of it", job.id, cx_id)
                return
            if cx.status == "pending":
                cx = decide(cx, job)
                await self.store.save(cx)
            if cx.status == "confirmed" and cx.regression_pr is None:
                cx.regression_pr = await open_regression_pr(self.forge, cx, self.settings.base)
                await self.store.save(cx)
            await self.tell(cx)
        finally:
            await self.store.unlock(cx_id)

    async def tell(self, cx: Counterexample) -> None:
        """One DM to the finder, from the job runner's notice principal (deduplicated per record)."""
        sender, _ = await self.ctx.principals.ensure(NOTICE_SENDER, PrincipalKind.gate)
        if sender.kind != PrincipalKind.gate:  # an agent took the name: never speak as it
            log.warning("principal %s is a %s: no counterexample notice", NOTICE_SENDER, sender.kind.value)
            return
        await self.ctx.chat.post_dm(sender, cx.finder, notice(cx), dedupe=f"cx-notice:{cx.id}")
