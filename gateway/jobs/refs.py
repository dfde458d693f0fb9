"""How a submission's repo and ref become a sha, and what task definition a job gets, through the
gateway's forge (the Forge protocol: the same on the embedded forge and Gitea). Without a forge, a job
names its repo and a full sha."""

from __future__ import annotations

from gateway.client.jobs.models import SHA_RE
from gateway.context import GatewayContext
from gateway.errors import BoardError, ForgeError, JobError
from gateway.forge.models import PullRequest
from gateway.forge.protocol import Forge
from gateway.forge.service import resolve_repo
from gateway.services import FORGE
from gateway.tasks.definitions import task_definition
from gateway.tasks.models import TaskDefinition


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
        forge = self.forge
        if forge is None:
            if not repo:
                raise JobError("name the repo as org/name")
            return repo
        org, name = await resolve_repo(self.ctx, repo)
        if not any(r.full_name == f"{org}/{name}" for r in await forge.list_repos(name)):
            raise JobError(f"no repository {org}/{name}", 404)  # fail early, naming it
        return f"{org}/{name}"

    async def resolve(self, repo: str, ref: str, path: str) -> tuple[str, bool | None]:
        """(sha of ``ref``, whether ``path`` is a file there, or None when unknown).

        A branch name wins over a tag or sha of the same spelling, as the forge resolves it."""
        forge = self.forge
        if forge is None:
            if SHA_RE.match(ref):
                return ref, None
            raise JobError(f"cannot resolve {ref!r} without a forge: give the full 40-hex sha")
        if "\n" in ref or "\n" in path:
            raise JobError("bad ref or path")
        org, _, name = repo.partition("/")
        sha = await forge.resolve_ref(org, name, ref)
        if sha is None:
            raise JobError(f"no commit {ref!r} in {repo}", 404)
        return sha, await forge.read_file(org, name, sha, path) is not None

    async def pull(self, repo: str, number: int) -> PullRequest:
        forge = self.forge
        if forge is None:
            raise JobError("no forge: reproductions need the forge plugin")
        org, _, name = repo.partition("/")
        return await forge.get_pr(org, name, number)

    async def task(self, repo: str, task: str) -> TaskDefinition:
        """The definition a worker will load for ``task`` (``gateway/tasks/definitions.py``): the
        repo's protected main when it is a trusted dataset branch, else the catalogue; 404 when
        neither has it. Submission checks with it that the task exists where the worker will look."""
        try:
            return await task_definition(self.forge, repo, task, with_content=False)
        except (BoardError, ForgeError) as exc:
            raise JobError(exc.message, exc.status) from None
