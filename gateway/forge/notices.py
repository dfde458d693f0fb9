"""Chat notices the forge sends: a requested reviewer finds the request in their inbox."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from gateway.context import GatewayContext
from gateway.forge.models import PullRequest
from gateway.principals import Principal

log = logging.getLogger("kswarm.forge")


async def notify_review_request(
    ctx: GatewayContext, requester: Principal, pr: PullRequest, reviewers: Sequence[str]
) -> None:
    """Post one notice in #reviews mentioning the reviewers; mentions land in their inboxes."""
    names = [r for r in reviewers if r != requester.name]
    if not names:
        return
    mentions = " ".join(f"@{n}" for n in names)
    text = (
        f'{mentions}: @{requester.name} asks for your review of {pr.ref} "{pr.title}" '
        f'({pr.head} -> {pr.base}). Look with pr_view(number={pr.number}, repo="{pr.full_name}").'
    )
    try:
        await ctx.chat.notify(requester, "reviews", text)
    except Exception:  # the PR stands even when the chat refuses (rate limit, ...)
        log.exception("review-request notice for %s failed", pr.ref)
