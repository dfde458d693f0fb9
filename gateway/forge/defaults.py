"""The repo the agents' PR tools (and job submissions) use when they name none.

It never depends on which other repos exist: ``KSWARM_FORGE_DEFAULT_REPO`` when set; else the one an
operator named (``PUT /api/forge/default-repo``, or ``POST /api/forge/repos`` with ``default: true``:
the supervisor names the spec's); else the first work repo created through ``POST /api/forge/repos``,
``KSWARM_FORGE_REPOS`` or the dataset seeding, recorded once (``ks:forge:default-repo``), so a repo
created later, the knowledge base's included (the KB ensures its repo straight through the forge and
is never a default), changes nothing. With none of these, the caller must name the repo.
"""

from __future__ import annotations

from gateway.forge import keys
from gateway.redis_facade import StrRedis

DEFAULT_REPO = f"{keys.PREFIX}default-repo"


class DefaultRepo:
    def __init__(self, redis: StrRedis) -> None:
        self.redis = redis

    async def get(self) -> str | None:
        value = await self.redis.get(DEFAULT_REPO)
        return str(value) if value else None

    async def set(self, repo: str) -> None:
        await self.redis.set(DEFAULT_REPO, repo)

    async def claim(self, repo: str) -> bool:
        """Make ``repo`` the default unless there is one already (the first work repo wins)."""
        return bool(await self.redis.set(DEFAULT_REPO, repo, nx=True))
