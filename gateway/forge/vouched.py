"""Heads kswarm itself committed for an operator: the only PR heads allowed to change trusted paths.

A dataset branch's trusted paths (``tasks/``, references, CI and configuration files) are the
operators'. An operator changes them through a reviewed PR that kswarm commits for them (``kswarm tasks
add``: ``Forge.commit_files`` as the operator, on a new branch). The gate once exempted any PR *opened*
by an operator; but in Gitea mode anyone with write access may push to any unprotected branch, the
operator's PR branch included, so an agent could move such a PR's head to its own ``tasks/`` change and
then need only the usual approvals of the new head. The exemption therefore belongs to the head, not to
the author: the PR is an operator's **and** its head is a commit kswarm made for an operator, recorded
here (by repo) when it made it. Any later push moves the head off the record, and the trusted paths
block again. The same rule holds with the embedded forge (where no one else can push to an operator's
branch anyway), so trusted paths change one way: ``kswarm tasks add``.
"""

from __future__ import annotations

from redis.asyncio import Redis

from gateway.forge import keys


def operator_heads(repo: str) -> str:
    return f"{keys.PREFIX}operator-heads:{repo}"  # set of shas kswarm committed for an operator


class OperatorHeads:
    """``record`` what kswarm committed for an operator; the gate asks ``vouches``."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def record(self, repo: str, sha: str) -> None:
        await self.redis.sadd(operator_heads(repo), sha)

    async def vouches(self, repo: str, sha: str) -> bool:
        return bool(await self.redis.sismember(operator_heads(repo), sha))
