"""kswarm's own forge REST under ``/api/forge``: PR views with the gate's reasons (for ``kswarm pr``),
repo and policy provisioning, forge accounts."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from gateway.deps import AnyPrincipal, Ctx, OperatorOnly
from gateway.errors import ForgeError
from gateway.forge.defaults import DefaultRepo
from gateway.forge.gate.policy import ReviewPolicy
from gateway.forge.models import ForgeUser, RepoInfo
from gateway.forge.service import (
    default_repo,
    forge_of,
    gate_of,
    pr_view,
    resolve_repo,
    review_event,
    summary,
)
from gateway.services import FORGE_SETTINGS


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")  # an identity field in a body is an error, not ignored


class RepoCreate(_Body):
    org: str
    name: str
    default_branch: str = "main"
    default: bool | None = Field(
        None,
        description="true: this is the default repo from now on; omitted: it is when none is set yet "
        "(the first work repo); false: never make it the default.",
    )


class DefaultRepoBody(_Body):
    repo: str = Field(description="org/name")


class ReviewBody(_Body):
    event: str = Field(description="APPROVED (or APPROVE), REQUEST_CHANGES or COMMENT.")
    body: str = ""
    head_sha: str = Field("", description="The head you reviewed: 409 when the PR has moved on since.")


class CommentBody(_Body):
    body: str


router = APIRouter(prefix="/api/forge", tags=["forge"])


@router.get("")
async def info(ctx: Ctx, _: AnyPrincipal) -> dict[str, Any]:
    """Which forge backs this gateway, and its repos with their clone URLs."""
    forge = forge_of(ctx)
    repos = await forge.list_repos()
    return {"kind": forge.kind, "repos": [x.model_dump() | {"full_name": x.full_name} for x in repos]}


@router.get("/repos", response_model=list[RepoInfo])
async def repos(ctx: Ctx, _: AnyPrincipal) -> list[RepoInfo]:
    return await forge_of(ctx).list_repos()


@router.post("/repos", response_model=RepoInfo, status_code=201)
async def create_repo(body: RepoCreate, ctx: Ctx, _: OperatorOnly) -> RepoInfo:
    info = await forge_of(ctx).ensure_repo(body.org, body.name, body.default_branch)
    if body.default:
        await DefaultRepo(ctx.redis).set(info.full_name)
    elif body.default is None:
        await DefaultRepo(ctx.redis).claim(info.full_name)
    return info


@router.get("/default-repo")
async def get_default_repo(ctx: Ctx, _: AnyPrincipal) -> dict[str, str | None]:
    """The repo the PR tools and job submissions use when they name none (null: they must name one)."""
    return {"repo": await default_repo(ctx)}


@router.put("/default-repo")
async def set_default_repo(body: DefaultRepoBody, ctx: Ctx, _: OperatorOnly) -> dict[str, str | None]:
    org, name = await resolve_repo(ctx, body.repo)
    if not any(x.full_name == f"{org}/{name}" for x in await forge_of(ctx).list_repos(name)):
        raise ForgeError(f"no repository {org}/{name}", 404)
    await DefaultRepo(ctx.redis).set(f"{org}/{name}")
    return {"repo": await default_repo(ctx)}


@router.put("/repos/{org}/{repo}/policy", response_model=ReviewPolicy)
async def set_policy(org: str, repo: str, policy: ReviewPolicy, ctx: Ctx, _: OperatorOnly) -> ReviewPolicy:
    for branch in policy.protected_branches:
        await forge_of(ctx).protect_branch(org, repo, branch, policy)
    return policy


@router.get("/repos/{org}/{repo}/policy/{branch}", response_model=ReviewPolicy)
async def get_policy(org: str, repo: str, branch: str, ctx: Ctx, _: AnyPrincipal) -> ReviewPolicy:
    policy = await forge_of(ctx).get_protection(org, repo, branch)
    if policy is None:
        raise ForgeError(f"{branch} is not protected", 404)
    return policy


@router.post("/accounts/{name}", response_model=ForgeUser, status_code=201)
async def account(name: str, ctx: Ctx, _: OperatorOnly) -> ForgeUser:
    """Ensure the forge account of an existing principal (Gitea: create it); returns a fresh token."""
    principal = await ctx.principals.get(name)
    if principal is None:
        raise ForgeError(f"unknown principal {name!r}", 404)
    return await forge_of(ctx).ensure_user(name, principal.email, principal.kind.value)


@router.get("/pulls")
async def pulls(
    ctx: Ctx,
    _: AnyPrincipal,
    repo: Annotated[str | None, Query(description="org/name; default: every repo")] = None,
    state: Annotated[str, Query(description="open, closed or all")] = "open",
) -> list[dict[str, Any]]:
    forge, gate = forge_of(ctx), gate_of(ctx)
    targets = [await resolve_repo(ctx, repo)] if repo else [(x.org, x.name) for x in await forge.list_repos()]
    out = []
    for org, name in targets:
        for pr in await forge.list_prs(org, name, state):
            if pr.state == "open":
                pr, decision = await gate.decide(org, name, pr.number)
                out.append(summary(pr, decision))
            else:
                out.append(summary(pr))
    return out


@router.post("/repos/{org}/{repo}/pulls/{number}/reviews", status_code=201)
async def review(
    org: str, repo: str, number: int, body: ReviewBody, ctx: Ctx, who: AnyPrincipal
) -> dict[str, Any]:
    """A review as the token's principal: an operator's approval is a human one (the policy's
    ``human_approvals``), an agent's an agent's; nothing in the body says who reviews."""
    found = await forge_of(ctx).review(
        who.name, org, repo, number, review_event(body.event), body.body, body.head_sha
    )
    return {"id": found.id, "user": found.user, "state": found.state, "commit_id": found.commit_id}


@router.post("/repos/{org}/{repo}/pulls/{number}/comments", status_code=201)
async def comment(
    org: str, repo: str, number: int, body: CommentBody, ctx: Ctx, who: AnyPrincipal
) -> dict[str, Any]:
    found = await forge_of(ctx).comment(who.name, org, repo, number, body.body)
    return {"id": found.id, "user": found.user}


@router.get("/repos/{org}/{repo}/pulls/{number}")
async def pull(
    org: str, repo: str, number: int, ctx: Ctx, _: AnyPrincipal, diff: Annotated[bool, Query()] = False
) -> dict[str, Any]:
    max_bytes = ctx.services.get(FORGE_SETTINGS).diff_max_bytes
    return await pr_view(ctx, org, repo, number, diff_bytes=max_bytes if diff else 0, audit=50)
