"""The operator's actions, for the UI and the CLI: each one done through the owning component's own
service (the same code its REST routes and MCP tools run, with the operator as the actor), then audited
twice: an entry in ``ks:mon:actions`` (who, what, on what, the outcome) and a message in the chat as the
operator (PR actions in ``#reviews``, the others in ``#ops``) that @mentions the agent concerned, so it
finds it in its inbox. A refusal by the component (a closed PR, a job that is not final) is audited as
``refused`` and answered with the component's own status and message.

- review (approve / request changes / comment) and comment: the forge's ``review`` / ``comment`` as the
  operator; the gate then re-decides the PR (its audit log records the decision and the approvals that
  counted, the operator's among them);
- cancel: the job runner's ``cancel`` as the operator;
- requeue: a **new** job of the same kernel at the same commit (``ref`` = the resolved sha), pool, kind,
  devices and timeout, submitted by the operator; refused, saying why, when the commit is no longer
  reachable (``gateway.monitor.requeue``), and then offered at the head of the job's PR or branch
  (``at_head``: "resubmit"). A final job stays final: its result was delivered once
  (evidence to the gate, the notice to its submitter) and reopening it would retract what the gate
  already acted on; the new job's result is new evidence for that same sha;
- tasks: post (``TaskSpec``), release (the operator's forced release), reassign (release, then a DM to
  the new agent asking it to claim the task: a claim is always the claimant's own act).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from gateway.client.jobs.models import JobRequest
from gateway.context import GatewayContext
from gateway.errors import GatewayError, NotFound
from gateway.forge.gate.policy import ReviewPolicy, operator_approval_counts
from gateway.monitor import keys
from gateway.monitor.models import ActionRecord, ActionResult, ReassignBody, ReviewBody
from gateway.monitor.requeue import requeue_check
from gateway.monitor.settings import MonitorSettings
from gateway.principals import Principal, PrincipalKind
from gateway.redis_facade import StrRedis
from gateway.services import FORGE, JOB_SERVICE, TASK_BOARD, ServiceKey

log = logging.getLogger("kswarm.monitor")

REVIEW_EVENTS = {"approve": "APPROVED", "request_changes": "REQUEST_CHANGES", "comment": "COMMENT"}
REVIEW_WORDS = {"approve": "approved", "request_changes": "requested changes on", "comment": "commented on"}


def _quote(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ActionLog:
    """The operators' audit stream."""

    def __init__(self, redis: StrRedis, maxlen: int) -> None:
        self.redis = redis
        self.maxlen = maxlen

    async def add(self, record: ActionRecord) -> str:
        entry_id = await self.redis.xadd(
            keys.ACTIONS,
            {"json": record.model_dump_json(exclude={"id"})},
            maxlen=self.maxlen,
            approximate=True,
        )
        return str(entry_id)

    async def recent(self, limit: int = 50, target: str | None = None) -> list[ActionRecord]:
        out: list[ActionRecord] = []
        upper = "+"
        while len(out) < limit:
            rows = await self.redis.xrevrange(keys.ACTIONS, upper, "-", 200)
            for entry_id, fields in rows:
                try:
                    record = ActionRecord.model_validate(
                        json.loads(fields.get("json", "{}")) | {"id": entry_id}
                    )
                except ValueError:
                    continue
                if target is None or record.target == target:
                    out.append(record)
            if len(rows) < 200:
                break
            upper = f"({rows[-1][0]}"
        return out[:limit]


class OperatorActions:
    def __init__(self, ctx: GatewayContext, settings: MonitorSettings) -> None:
        self.ctx = ctx
        self.settings = settings
        self.log = ActionLog(ctx.redis, settings.actions_maxlen)

    def _service(self, key: ServiceKey[Any], what: str) -> Any:
        service = self.ctx.services.find(key)
        if service is None:
            raise GatewayError(f"no {what} is registered with this gateway", 501)
        return service

    async def _audit(
        self,
        operator: Principal,
        action: str,
        target: str,
        detail: str,
        outcome: str,
        message: str,
        channel: str | None = None,
        text: str | None = None,
    ) -> None:
        record = ActionRecord(
            ts=time.time(),
            operator=operator.name,
            action=action,
            target=target,
            detail=detail,
            outcome=outcome,
            message=message,
        )
        await self.log.add(record)
        if channel and text and outcome == "done":
            for attempt in (text, text.replace("@", "")):  # an unknown @mention: post it unmentioned
                try:
                    await self.ctx.chat.post(operator, channel, attempt)
                    break
                except GatewayError as exc:  # the action stands; only its announcement failed
                    log.warning("action audit post to #%s failed: %s", channel, exc.message)

    async def _run(
        self,
        operator: Principal,
        action: str,
        target: str,
        detail: str,
        call: Any,
    ) -> Any:
        """``await call`` and audit a refusal (then re-raised for the caller's answer)."""
        try:
            return await call
        except GatewayError as exc:
            await self._audit(operator, action, target, detail, "refused", exc.message)
            raise

    # -- PRs --------------------------------------------------------------------------------

    async def review(
        self, operator: Principal, org: str, repo: str, number: int, body: ReviewBody
    ) -> ActionResult:
        forge = self._service(FORGE, "forge")
        target = f"{org}/{repo}#{number}"
        event = REVIEW_EVENTS[body.event]
        review = await self._run(
            operator,
            f"review:{body.event}",
            target,
            _quote(body.body),
            forge.review(operator.name, org, repo, number, event, body.body, body.head_sha),
        )
        pr = await forge.get_pr(org, repo, number)
        head = (review.commit_id or "")[:10]
        words = f"{REVIEW_WORDS[body.event]} {target} at {head}"
        text = f"@{pr.author} {operator.name} {words}" + (
            f": {_quote(body.body)}" if body.body.strip() else ""
        )
        message = f"{operator.name} {words}"
        if body.event == "approve":
            policy = await forge.get_protection(org, repo, pr.base) or ReviewPolicy()
            message += f"; your approval is recorded: {operator_approval_counts(policy)}"
        await self._audit(
            operator, f"review:{body.event}", target, _quote(body.body), "done", message,
            self.settings.review_channel, text,
        )  # fmt: skip
        return ActionResult(
            ok=True, message=message, data={"review_id": review.id, "commit_id": review.commit_id}
        )

    async def comment(self, operator: Principal, org: str, repo: str, number: int, body: str) -> ActionResult:
        forge = self._service(FORGE, "forge")
        target = f"{org}/{repo}#{number}"
        comment = await self._run(
            operator, "comment", target, _quote(body), forge.comment(operator.name, org, repo, number, body)
        )
        pr = await forge.get_pr(org, repo, number)
        message = f"{operator.name} commented on {target}"
        text = f"@{pr.author} {message}: {_quote(body)}"
        await self._audit(
            operator, "comment", target, _quote(body), "done", message, self.settings.review_channel, text
        )
        return ActionResult(ok=True, message=message, data={"comment_id": comment.id})

    # -- jobs -------------------------------------------------------------------------------

    async def cancel_job(self, operator: Principal, job_id: str) -> ActionResult:
        svc = self._service(JOB_SERVICE, "job runner")
        current = await self._run(operator, "job:cancel", job_id, "", svc.read(operator, job_id))
        if current.terminal or current.cancel_requested:
            # A running job already being stopped is cancelled as far as anyone can make it: a second
            # cancel changes nothing and must not be announced as if it did.
            why = f"job {job_id} is already {current.state}" + (
                "" if current.terminal else ": cancelled, its worker is stopping it"
            )
            await self._audit(operator, "job:cancel", job_id, "", "refused", why)
            raise GatewayError(why, 409)
        job = await self._run(operator, "job:cancel", job_id, "", svc.cancel(operator, job_id))
        if job.terminal:
            done = f"before it started: now {job.state}"
        else:  # the worker stops it and records it as cancelled; until then it reads running
            done = "it was running; its worker stops it and records it as cancelled"
        message = f"{operator.name} cancelled job {job_id} ({job.task}, {job.pool}): {done}"
        text = f"@{job.submitter} {message}" if job.submitter != operator.name else message
        await self._audit(
            operator, "job:cancel", job_id, "", "done", message, self.settings.audit_channel, text
        )
        return ActionResult(ok=True, message=message, data={"state": str(job.state)})

    async def requeue_job(self, operator: Principal, job_id: str, at_head: bool = False) -> ActionResult:
        """A new job of ``job_id``'s kernel at its commit; with ``at_head``, at the current head of what
        it verified (``gateway.monitor.requeue``): what is offered when its commit is gone."""
        action = "job:resubmit" if at_head else "job:requeue"
        svc = self._service(JOB_SERVICE, "job runner")
        job = await svc.queue.get(job_id)
        if job is None:
            await self._audit(operator, action, job_id, "", "refused", f"no job {job_id}")
            raise NotFound(f"no job {job_id}")
        if not job.terminal:
            why = f"job {job_id} is {job.state}: only a finished job is requeued (cancel it first)"
            await self._audit(operator, action, job_id, "", "refused", why)
            raise GatewayError(why, 409)
        check = await requeue_check(self.ctx.services.find(FORGE), job)
        sha = job.sha
        if at_head:
            if check.head_sha is None:
                why = f"job {job_id}: " + (check.reason or "no open PR or branch names a newer head")
                await self._audit(operator, action, job_id, "", "refused", why)
                raise GatewayError(why, 409)
            sha = check.head_sha
        elif not check.possible:
            hint = f" (kswarm job retry {job_id} --at-head)" if check.head_sha else ""
            why = f"job {job_id} cannot be requeued: {check.reason}{hint}"
            await self._audit(operator, action, job_id, "", "refused", why)
            raise GatewayError(why, 409)
        request = JobRequest(
            kernel=job.kernel,
            task=job.task,
            ref=sha,
            repo=job.repo,
            pool=job.pool,
            devices=job.devices,
            kind=job.kind,
            timeout_s=job.timeout_s,
        )
        new = await self._run(operator, action, job_id, "", svc.submit(operator, request))
        # Requeued, the old job's failure or dead letter is dealt with: off Attention (ks:mon:ack), until
        # it happens again (the new job's own failure is a new item).
        await self.ctx.redis.hset(
            keys.ACK,
            mapping={f"job:{job_id}": repr(time.time()), f"dead:{job.pool}:{job_id}": repr(time.time())},
        )
        where = f"at the head of {check.head_of}, {sha[:10]}" if at_head else f"at {sha[:10]}"
        verb = "resubmitted" if at_head else "requeued"
        what = f"{job.kernel} {where} on {job.pool} ({job.kind})"
        message = f"{operator.name} {verb} job {job_id} as {new.id}: {what}"
        text = f"@{job.submitter} {message}" if job.submitter != operator.name else message
        await self._audit(
            operator, action, job_id, new.id, "done", message, self.settings.audit_channel, text
        )
        return ActionResult(ok=True, message=message, data={"job": new.id, "requeued": job_id, "sha": sha})

    # -- tasks ------------------------------------------------------------------------------

    async def post_task(self, operator: Principal, spec: Any) -> ActionResult:
        svc = self._service(TASK_BOARD, "task board")
        task = await self._run(operator, "task:post", spec.id, _quote(spec.title), svc.post(operator, spec))
        message = f"{operator.name} posted task {task.id}: {task.title}"
        await self._audit(operator, "task:post", task.id, _quote(task.title), "done", message)
        return ActionResult(ok=True, message=message, data={"task": task.id})

    async def release_task(self, operator: Principal, task_id: str) -> ActionResult:
        svc = self._service(TASK_BOARD, "task board")
        before = await self._run(operator, "task:release", task_id, "", svc.board.get(task_id))
        await self._run(operator, "task:release", task_id, "", svc.release(operator, task_id))
        holder = before.holder
        message = f"{operator.name} released task {task_id}" + (f" (held by {holder})" if holder else "")
        text = f"@{holder} {message}" if holder else message
        await self._audit(
            operator,
            "task:release",
            task_id,
            holder or "",
            "done",
            message,
            self.settings.audit_channel,
            text,
        )
        return ActionResult(ok=True, message=message)

    async def reassign_task(self, operator: Principal, task_id: str, body: ReassignBody) -> ActionResult:
        svc = self._service(TASK_BOARD, "task board")
        target = await self.ctx.principals.get(body.agent)
        if target is None or target.kind != PrincipalKind.agent:
            why = f"{body.agent} is not an agent"
            await self._audit(operator, "task:reassign", task_id, body.agent, "refused", why)
            raise GatewayError(why, 422)
        before = await self._run(operator, "task:reassign", task_id, body.agent, svc.board.get(task_id))
        if before.state == "done":
            why = f"task {task_id} is done"
            await self._audit(operator, "task:reassign", task_id, body.agent, "refused", why)
            raise GatewayError(why, 409)
        if before.holder:
            await self._run(operator, "task:reassign", task_id, body.agent, svc.release(operator, task_id))
        note = f" {body.note}" if body.note.strip() else ""
        await self.ctx.chat.post_dm(
            operator,
            body.agent,
            f"Please take task `{task_id}` ({before.title}): task_claim it.{note}"
            + (f" (released from {before.holder})" if before.holder else ""),
        )
        message = f"{operator.name} reassigned task {task_id} to {body.agent}" + (
            f" (released from {before.holder})" if before.holder else ""
        )
        text = f"@{before.holder} {message}" if before.holder and before.holder != body.agent else message
        await self._audit(
            operator, "task:reassign", task_id, body.agent, "done", message, self.settings.audit_channel, text
        )
        return ActionResult(ok=True, message=message)

    # -- attention --------------------------------------------------------------------------

    async def ack(self, operator: Principal, key: str) -> ActionResult:
        await self.ctx.redis.hset(keys.ACK, key, repr(time.time()))
        message = f"{operator.name} dismissed {key}"
        await self._audit(operator, "attention:ack", key, "", "done", message)
        return ActionResult(ok=True, message=message)
