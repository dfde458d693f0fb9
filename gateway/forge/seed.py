"""Seeding a protected branch: an operator-provided initial tree, committed server-side by the gate.

The dataset template and the knowledge base's first notes must land on a ``main`` that is protected
from the start (no push reaches it, and there is no moment in which it is unprotected). The gate's
principal commits them through the Forge protocol (``commit_files``; the gate is the only principal a
protected branch takes commits from), and only while the branch holds nothing but the forge's
initial commit, so seeding never overwrites reviewed work: the check and the commit happen under the
branch's merge lock (``locks.py``) and the commit is made against exactly the head that was checked.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.errors import ForgeError
from gateway.forge.locks import branch_lock
from gateway.forge.protocol import Forge
from gateway.redis_facade import StrRedis

GATE = "gate"


async def seed_branch(
    forge: Forge,
    redis: StrRedis,
    org: str,
    repo: str,
    branch: str,
    files: Mapping[str, bytes],
    message: str,
) -> str | None:
    """The seed commit on ``org/repo:branch``, or None when the branch already has history (seeded
    before, or changed by a merge) or moved while seeding."""
    async with branch_lock(redis, f"{org}/{repo}", branch):
        head = await forge.resolve_ref(org, repo, branch)
        if head is None:
            raise ForgeError(f"{org}/{repo} has no branch {branch}", 404)
        if (await forge.get_commit(org, repo, head)).parents:
            return None
        try:
            return await forge.commit_files(GATE, org, repo, branch, dict(files), message, expected_head=head)
        except ForgeError as exc:
            if exc.status in (409, 422):  # moved, or a path appeared meanwhile: someone else seeded
                return None
            raise
