"""The agents' PR tools on the gateway's MCP server; the author or reviewer is the token's principal."""

from __future__ import annotations

from typing import Any

from gateway.context import GatewayContext
from gateway.forge.notices import notify_review_request
from gateway.forge.service import forge_of, gate_of, pr_view, resolve_repo, review_event, summary
from gateway.mcp_server import caller
from gateway.plugin import McpTools
from gateway.services import FORGE_SETTINGS


def pr_tools(ctx: GatewayContext) -> McpTools:
    tools = McpTools()

    @tools.tool(
        name="pr_open",
        description="Open a PR from your pushed branch (<you>/...) into base; reviewers get an inbox notice.",
    )
    async def pr_open(
        head: str,
        title: str,
        body: str = "",
        base: str | None = None,
        reviewers: list[str] | None = None,
        repo: str | None = None,
    ) -> dict[str, Any]:
        me = caller()
        org, name = await resolve_repo(ctx, repo)
        forge = forge_of(ctx)
        if not base:
            repos = await forge.list_repos(f"{org}/{name}")
            base = next((r.default_branch for r in repos if r.full_name == f"{org}/{name}"), "main")
        pr = await forge.open_pr(me.name, org, name, head, base, title, body, reviewers or [])
        await notify_review_request(ctx, me, pr, pr.requested_reviewers)
        return summary(pr)

    @tools.tool(name="pr_list", description="List PRs (state open|closed|all) with the gate's verdict.")
    async def pr_list(
        repo: str | None = None, state: str = "open", mine: bool = False
    ) -> list[dict[str, Any]]:
        me = caller()
        org, name = await resolve_repo(ctx, repo)
        prs = await forge_of(ctx).list_prs(org, name, state)
        out = []
        for pr in prs:
            if mine and pr.author != me.name:
                continue
            if pr.state == "open":
                pr, decision = await gate_of(ctx).decide(org, name, pr.number)
                out.append(summary(pr, decision))
            else:
                out.append(summary(pr))
        return out

    @tools.tool(
        name="pr_view",
        description="A PR: diff (cut when long: diff_truncated), reviews, checks, comments, why the gate "
        "will or won't merge.",
    )
    async def pr_view_tool(number: int, repo: str | None = None, diff: bool = True) -> dict[str, Any]:
        caller()
        diff_bytes = ctx.services.get(FORGE_SETTINGS).diff_max_chars if diff else 0
        org, name = await resolve_repo(ctx, repo)
        return await pr_view(ctx, org, name, number, diff_bytes=diff_bytes, audit=3)

    @tools.tool(
        name="pr_review",
        description="Review a PR: APPROVED, REQUEST_CHANGES or COMMENT (+body); head_sha pins what you read.",
    )
    async def pr_review(
        number: int, event: str, body: str = "", head_sha: str = "", repo: str | None = None
    ) -> dict[str, Any]:
        me = caller()
        org, name = await resolve_repo(ctx, repo)
        review = await forge_of(ctx).review(me.name, org, name, number, review_event(event), body, head_sha)
        return {"id": review.id, "state": review.state, "commit_id": review.commit_id}

    @tools.tool(name="pr_comment", description="Comment on a PR (discussion; not a review verdict).")
    async def pr_comment(number: int, body: str, repo: str | None = None) -> dict[str, Any]:
        me = caller()
        org, name = await resolve_repo(ctx, repo)
        comment = await forge_of(ctx).comment(me.name, org, name, number, body)
        return {"id": comment.id}

    return tools
