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

import json

from gateway.forge import keys
from gateway.redis_facade import StrRedis


def operator_heads(repo: str) -> str:
    return f"{keys.PREFIX}operator-heads:{repo}"  # hash: sha -> {"branch", "base"} kswarm committed


class OperatorHeads:
    """``record`` what kswarm committed for an operator (the branch it made and the base it proposed
    the commit for); the gate asks ``vouches`` and ``forget``s a head once its PR is closed or merged.

    A record is bound to the branch and the base, not to the sha alone: the same commit on another
    branch, or the PR pointed at another protected branch (whose whole history would then look like the
    operator's change), is not vouched for. Forgetting at close keeps a PR the operator closed (a task
    they rejected) from being reopened by a writer and merged with an agent's approval."""

    def __init__(self, redis: StrRedis) -> None:
        self.redis = redis

    async def record(self, repo: str, sha: str, branch: str, base: str) -> None:
        await self.redis.hset(operator_heads(repo), sha, json.dumps({"branch": branch, "base": base}))

    async def vouches(self, repo: str, sha: str, branch: str, base: str) -> bool:
        raw = await self.redis.hget(operator_heads(repo), sha)
        if not raw:
            return False
        try:
            made = json.loads(raw)
        except ValueError:
            return False
        return isinstance(made, dict) and made.get("branch") == branch and made.get("base") == base

    async def forget(self, repo: str, sha: str) -> None:
        await self.redis.hdel(operator_heads(repo), sha)
