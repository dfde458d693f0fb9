"""Whether a finished job can be requeued, and what can be offered when it cannot.

A requeue runs the kernel again at the job's own commit. That works only while a clone can fetch the
commit (``Forge.commit_reachable``): a force-pushed branch or a deleted one leaves it dangling (and a
gc removes it), and the worker's checkout would then fail. Instead the operator is told why and offered
a resubmission at the current head of what the job was verifying: the open PR whose branch the job
named, the PR it reproduced, or the branch itself. Attention's job items, the job page's button,
``POST /api/actions/jobs/<id>/requeue`` and ``kswarm job retry`` all ask ``requeue_check``.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from gateway.client.jobs.models import SHA_RE, Job
from gateway.errors import ForgeError
from gateway.forge.protocol import Forge


class RequeueCheck(BaseModel):
    """Whether ``requeue`` can work, else why not and where a resubmission would run."""

    possible: bool = Field(description="The job's commit is still reachable: a requeue can run.")
    reason: str = Field("", description="Why a requeue cannot work (empty when it can).")
    head_sha: str | None = Field(None, description="The head a resubmission runs at, when there is one.")
    head_of: str = Field("", description="What that head is: 'PR org/name#12' or 'branch feat'.")


def head_label(head_of: str) -> str:
    """The button's words for a resubmission at ``head_of``'s head."""
    return "Resubmit at PR head" if head_of.startswith("PR ") else "Resubmit at branch head"


async def current_head(forge: Forge, job: Job) -> tuple[str | None, str]:
    """(sha, what it is the head of) for what ``job`` was verifying: an open PR whose branch is the
    ref the job named, the PR it reproduced, else that branch itself; (None, '') when none is left."""
    org, _, name = job.repo.partition("/")
    if not SHA_RE.match(job.ref):
        for pr in await forge.list_prs(org, name, "open"):
            if pr.head == job.ref and pr.head_sha:
                return pr.head_sha, f"PR {job.repo}#{pr.number}"
    if job.reproduce_pr is not None:
        try:
            reproduced = await forge.get_pr(org, name, job.reproduce_pr)
        except ForgeError:
            reproduced = None
        if reproduced is not None and reproduced.state == "open" and reproduced.head_sha:
            return reproduced.head_sha, f"PR {job.repo}#{reproduced.number}"
    if not SHA_RE.match(job.ref):
        sha = await forge.resolve_ref(org, name, job.ref)
        if sha is not None:
            return sha, f"branch {job.ref}"
    return None, ""


async def requeue_check(forge: Forge | None, job: Job) -> RequeueCheck:
    """``possible`` when no forge can say otherwise (a job without a forge names a full sha)."""
    if forge is None:
        return RequeueCheck(possible=True)
    org, _, name = job.repo.partition("/")
    try:
        if await forge.commit_reachable(org, name, job.sha):
            return RequeueCheck(possible=True)
    except ForgeError as exc:
        return RequeueCheck(possible=False, reason=f"{job.repo}: {exc.message}")
    head, of = await current_head(forge, job)
    why = (
        f"its commit {job.sha[:10]} is no longer reachable in {job.repo} (the branch was force-pushed or "
        "deleted): a requeue at that commit would fail at checkout"
    )
    if head is None:
        why += "; no open PR or branch names a newer head: submit it again from the agent's branch"
    elif head == job.sha:  # the head is that very commit, only not reachable: nothing newer to run
        head, of = None, ""
    else:
        why += f"; resubmit at the head of {of} ({head[:10]})"
    return RequeueCheck(possible=False, reason=why, head_sha=head, head_of=of)
