"""What the MCP tools, the kswarm REST routes and the CLI share: repo resolution and PR views."""

from __future__ import annotations

from typing import Any

from gateway.context import GatewayContext
from gateway.errors import ForgeError
from gateway.forge.defaults import DefaultRepo
from gateway.forge.gate.gate import ReviewGate
from gateway.forge.gate.policy import GateDecision
from gateway.forge.models import PullRequest
from gateway.forge.protocol import Forge
from gateway.principals import Principal, PrincipalKind
from gateway.services import FORGE, FORGE_SETTINGS, REVIEW_GATE, TASK_BOARD


def forge_of(ctx: GatewayContext) -> Forge:
    return ctx.services.get(FORGE)


def gate_of(ctx: GatewayContext) -> ReviewGate:
    return ctx.services.get(REVIEW_GATE)


async def check_may_request_reviewers(ctx: GatewayContext, actor: Principal, pr: PullRequest) -> None:
    """Asking for reviewers is the PR's author's act, the operator's or a lead agent's: requested
    reviewers may read the PR's job records and logs (gateway/jobs/access.py), so nobody else may
    nominate themselves or others onto someone else's PR. Leads are the task board's (looked up when
    asked, so the forge does not depend on the tasks plugin; without it there are none)."""
    if actor.kind == PrincipalKind.operator or actor.name == pr.author:
        return
    board = ctx.services.find(TASK_BOARD)
    if board is not None and await board.is_lead(actor):
        return
    raise ForgeError(
        f"{actor.name} may not request reviewers on #{pr.number}: only its author (@{pr.author}), "
        "a lead agent or an operator may",
        403,
    )


REVIEW_WORDS = {
    "APPROVE": "APPROVED",
    "APPROVED": "APPROVED",
    "REQUEST_CHANGES": "REQUEST_CHANGES",
    "COMMENT": "COMMENT",
}


def review_event(event: str) -> str:
    """kswarm's tools take the three verdict words, GitHub's ``APPROVE`` as ``APPROVED`` too (what an
    agent types); the forge itself speaks Gitea's words only."""
    word = REVIEW_WORDS.get(event.strip().upper())
    if word is None:
        raise ForgeError(f"bad review event {event!r}: APPROVED, REQUEST_CHANGES or COMMENT", 422)
    return word


async def default_repo(ctx: GatewayContext) -> str | None:
    """The default repo (``gateway/forge/defaults.py``): the setting, else the recorded one."""
    return ctx.services.get(FORGE_SETTINGS).default_repo or await DefaultRepo(ctx.redis).get()


async def resolve_repo(ctx: GatewayContext, repo: str | None) -> tuple[str, str]:
    """``org/name`` -> (org, name); with none given, the default repo, which never depends on which
    other repos exist (``defaults.py``)."""
    if not repo:
        repo = await default_repo(ctx)
    if not repo:
        names = ", ".join(r.full_name for r in await forge_of(ctx).list_repos()) or "none"
        raise ForgeError(
            f"name the repo as org/name: no default repo is set (KSWARM_FORGE_DEFAULT_REPO or "
            f"PUT /api/forge/default-repo); repos: {names}",
            422,
        )
    org, _, name = repo.partition("/")
    if not org or not name or "/" in name:
        raise ForgeError(f"repo must be org/name, not {repo!r}", 422)
    return org, name


def summary(pr: PullRequest, decision: GateDecision | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "repo": pr.full_name,
        "number": pr.number,
        "title": pr.title,
        "author": pr.author,
        "head": pr.head,
        "base": pr.base,
        "state": "merged" if pr.merged else pr.state,
        "head_sha": pr.head_sha,
        "merged_at": pr.merged_at,  # the overview's "merged in the last hour" is checked against it
    }
    if decision is not None:
        out["gate"] = {"mergeable": decision.mergeable, "why": decision.summary()}
    return out


async def pr_view(
    ctx: GatewayContext, org: str, repo: str, number: int, diff_bytes: int = 0, audit: int = 10
) -> dict[str, Any]:
    """A PR with reviews, checks, comments, the gate's verdict (and reasons) and optionally its diff,
    at most ``diff_bytes`` (and never over the forge settings' caps), cut while it is read."""
    forge, gate = forge_of(ctx), gate_of(ctx)
    pr, decision = await gate.decide(org, repo, number)
    view = summary(pr, decision)
    view.update(
        body=pr.body,
        base_sha=pr.base_sha,
        mergeable=pr.mergeable,
        merge_sha=pr.merge_sha,
        requested_reviewers=pr.requested_reviewers,
        reviews=[
            {
                "user": r.user,
                "state": r.state,
                "body": r.body,
                "commit_id": r.commit_id,
                "stale": r.stale,
                "dismissed": r.dismissed,
            }
            for r in pr.reviews
        ],
        checks=[
            {
                "context": s.context,
                "state": s.state,
                "description": s.description,
                "target_url": s.target_url,
                "creator": s.creator,
            }
            for s in pr.statuses
        ],
        comments=[{"user": c.user, "body": c.body} for c in await forge.comments(org, repo, number)],
        gate={
            "mergeable": decision.mergeable,
            "reasons": [r.model_dump() for r in decision.reasons],
            "approvals": decision.approvals,
            "human_approvals": decision.human_approvals,
            "notes": decision.notes,
            "kernels": [k.model_dump() for k in decision.kernels],
            "blocked_paths": [b.model_dump() for b in decision.blocked_paths],
        },
    )
    if audit:
        view["audit"] = await gate.audit(pr.full_name, number, audit)
    if diff_bytes:
        settings = ctx.services.get(FORGE_SETTINGS)
        cut = await forge.pr_diff(
            org,
            repo,
            number,
            max_bytes=min(diff_bytes, settings.diff_max_bytes),
            max_file_bytes=settings.diff_max_file_bytes,
        )
        view["diff"] = cut.text
        view["diff_truncated"] = cut.truncated  # the text ends with or holds a "... " marker saying what
        view["diff_too_large"] = cut.too_large
    return view
