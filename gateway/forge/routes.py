"""kswarm's own forge REST under ``/api/forge``: PR views with the gate's reasons (for ``kswarm pr``),
repo and policy provisioning, forge accounts."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel

from gateway.deps import AnyPrincipal, Ctx, OperatorOnly
from gateway.errors import ForgeError
from gateway.forge.models import ForgeUser, RepoInfo
from gateway.forge.policy import ReviewPolicy
from gateway.forge.service import forge_of, gate_of, pr_view, resolve_repo, summary


class RepoCreate(BaseModel):
    org: str
    name: str
    default_branch: str = "main"


def build_forge_router() -> APIRouter:
    r = APIRouter(prefix="/api/forge", tags=["forge"])

    @r.get("")
    async def info(ctx: Ctx, _: AnyPrincipal) -> dict[str, Any]:
        """Which forge backs this gateway, and its repos with their clone URLs."""
        forge = forge_of(ctx)
        repos = await forge.list_repos()
        return {"kind": forge.kind, "repos": [x.model_dump() | {"full_name": x.full_name} for x in repos]}

    @r.get("/repos", response_model=list[RepoInfo])
    async def repos(ctx: Ctx, _: AnyPrincipal) -> list[RepoInfo]:
        return await forge_of(ctx).list_repos()

    @r.post("/repos", response_model=RepoInfo, status_code=201)
    async def create_repo(body: RepoCreate, ctx: Ctx, _: OperatorOnly) -> RepoInfo:
        return await forge_of(ctx).ensure_repo(body.org, body.name, body.default_branch)

    @r.put("/repos/{org}/{repo}/policy", response_model=ReviewPolicy)
    async def set_policy(
        org: str, repo: str, policy: ReviewPolicy, ctx: Ctx, _: OperatorOnly
    ) -> ReviewPolicy:
        for branch in policy.protected_branches:
            await forge_of(ctx).protect_branch(org, repo, branch, policy)
        return policy

    @r.get("/repos/{org}/{repo}/policy/{branch}", response_model=ReviewPolicy)
    async def get_policy(org: str, repo: str, branch: str, ctx: Ctx, _: AnyPrincipal) -> ReviewPolicy:
        policy = await forge_of(ctx).get_protection(org, repo, branch)
        if policy is None:
            raise ForgeError(f"{branch} is not protected", 404)
        return policy

    @r.post("/accounts/{name}", response_model=ForgeUser, status_code=201)
    async def account(name: str, ctx: Ctx, _: OperatorOnly) -> ForgeUser:
        """Ensure the forge account of an existing principal (Gitea: create it); returns a fresh token."""
        principal = await ctx.principals.get(name)
        if principal is None:
            raise ForgeError(f"unknown principal {name!r}", 404)
        return await forge_of(ctx).ensure_user(name, principal.email, principal.kind.value)

    @r.get("/pulls")
    async def pulls(
        ctx: Ctx,
        _: AnyPrincipal,
        repo: Annotated[str | None, Query(description="org/name; default: every repo")] = None,
        state: Annotated[str, Query(description="open, closed or all")] = "open",
    ) -> list[dict[str, Any]]:
        forge, gate = forge_of(ctx), gate_of(ctx)
        targets = (
            [await resolve_repo(ctx, repo)] if repo else [(x.org, x.name) for x in await forge.list_repos()]
        )
        out = []
        for org, name in targets:
            for pr in await forge.list_prs(org, name, state):
                if pr.state == "open":
                    pr, decision = await gate.decide(org, name, pr.number)
                    out.append(summary(pr, decision))
                else:
                    out.append(summary(pr))
        return out

    @r.get("/repos/{org}/{repo}/pulls/{number}")
    async def pull(
        org: str, repo: str, number: int, ctx: Ctx, _: AnyPrincipal, diff: Annotated[bool, Query()] = False
    ) -> dict[str, Any]:
        return await pr_view(ctx, org, repo, number, diff_chars=2_000_000 if diff else 0, audit=50)

    return r
