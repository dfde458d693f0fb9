"""How a submission's repo and ref become a sha, through the gateway's forge (when there is one:
without it, a job names its repo and a full sha)."""

from __future__ import annotations

from gateway.context import GatewayContext
from gateway.errors import JobError
from gateway.forge.embedded import EmbeddedForge
from gateway.forge.models import PullRequest
from gateway.forge.protocol import Forge
from gateway.forge.service import resolve_repo
from gateway.git.aio import BareRepo, run_git
from gateway.jobs.models import SHA_RE
from gateway.services import FORGE


class ForgeRefs:
    """Resolves ``org/name`` + ref to a sha through the gateway's forge, when there is one (without
    it, a job names its repo and a full sha)."""

    def __init__(self, ctx: GatewayContext, default_repo: str | None) -> None:
        self.ctx = ctx
        self.default_repo = default_repo

    @property
    def forge(self) -> Forge | None:
        return self.ctx.services.find(FORGE)

    async def repo(self, repo: str | None) -> str:
        repo = repo or self.default_repo
        if self.forge is None:
            if not repo:
                raise JobError("name the repo as org/name")
            return repo
        org, name = await resolve_repo(self.ctx, repo)
        if isinstance(self.forge, EmbeddedForge):  # fail early on a missing repo
            await self.forge.repo_info(org, name)
        return f"{org}/{name}"

    async def resolve(self, repo: str, ref: str, path: str) -> tuple[str, bool | None]:
        """(sha of ``ref``, whether ``path`` exists there or None when unknown); one git process.

        A branch name wins over a tag or sha of the same spelling, as the forge resolves it."""
        bare = self._bare(repo)
        if bare is None:
            if SHA_RE.match(ref):
                return ref, None
            raise JobError(f"cannot resolve {ref!r} without the embedded forge: give the full 40-hex sha")
        if "\n" in ref or "\n" in path:
            raise JobError("bad ref or path")
        names = [f"refs/heads/{ref}", ref]
        query = "".join(f"{n}^{{commit}}\n{n}:{path}\n" for n in names)
        result = await run_git("cat-file", "--batch-check", git_dir=bare.path, stdin=query.encode())
        kinds = [[*line.split(), "", ""][:2] for line in result.out.splitlines()]  # [object, type]
        for i in range(len(names)):
            (commit, kind), (_, blob) = [*kinds[2 * i : 2 * i + 2], ["", ""], ["", ""]][:2]
            if kind == "commit":
                return commit, blob == "blob"
        raise JobError(f"no commit {ref!r} in {repo}", 404)

    async def pull(self, repo: str, number: int) -> PullRequest:
        if self.forge is None:
            raise JobError("no forge: reproductions need the forge plugin")
        org, _, name = repo.partition("/")
        return await self.forge.get_pr(org, name, number)

    def _bare(self, repo: str) -> BareRepo | None:
        if not isinstance(self.forge, EmbeddedForge):
            return None
        org, _, name = repo.partition("/")
        return self.forge.bare(org, name)
