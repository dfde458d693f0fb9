"""kswarm's own branch rules in Gitea mode: what Gitea's branch protection cannot hold.

Gitea stores approvals and required status checks; reproduction, the dataset rules (trusted paths,
kernel ownership) and human approvals are the gate's, so the adapter keeps the whole ``ReviewPolicy``
in the gateway's Redis (``ks:forge:gitea-policy:<repo>``) beside Gitea's rule, and reads them back
merged: Gitea's fields from Gitea (an edit in Gitea's UI counts), kswarm's from here. A branch Gitea
does not protect is unprotected, whatever is stored here.
"""

from __future__ import annotations

from gateway.forge import keys
from gateway.forge.gate.policy import ReviewPolicy
from gateway.redis_facade import StrRedis


def policy_key(repo: str) -> str:
    return f"{keys.PREFIX}gitea-policy:{repo}"


class PolicyExtensions:
    def __init__(self, redis: StrRedis) -> None:
        self.redis = redis

    async def save(self, repo: str, branch: str, policy: ReviewPolicy) -> None:
        await self.redis.hset(policy_key(repo), branch, policy.model_dump_json())

    async def merged(self, repo: str, branch: str, gitea: ReviewPolicy) -> ReviewPolicy:
        raw = await self.redis.hget(policy_key(repo), branch)
        if not raw:
            return gitea
        stored = ReviewPolicy.model_validate_json(raw)
        return stored.model_copy(
            update={
                "required_approvals": gitea.required_approvals,
                "required_checks": gitea.required_checks,
                "protected_branches": gitea.protected_branches,
            }
        )
