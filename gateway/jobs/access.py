"""Who may read a job's record and log.

- operators, workers and the gate: every job (they run, judge and monitor them);
- the submitter: their own jobs;
- for a job that belongs to a PR — the submitter's own PR whose head is (or was, when it merged) the
  job's commit, or the PR the job reproduces — that PR's author and the reviewers requested on it
  (only its author or an operator may request them: gateway/forge/service.py). A review or comment
  grants nothing: anyone may post one, so it cannot be what opens someone else's evidence. (Only the
  submitter's own PRs count: anyone may open a PR at someone else's commit, and that must not open
  their jobs to them.)

Anyone else gets the answer a missing job gets (404, "no job ..."), in REST and MCP alike, so a job's
existence, its kernel and its log do not leak to agents outside that work. The UI is operator-only.
"""

from __future__ import annotations

from gateway.client.jobs.models import Job
from gateway.context import GatewayContext
from gateway.forge.models import PullRequest
from gateway.forge.protocol import Forge
from gateway.principals import Principal, PrincipalKind
from gateway.services import FORGE

SEE_ALL = frozenset({PrincipalKind.operator, PrincipalKind.worker, PrincipalKind.gate})


class JobAccess:
    """Readability checks; one instance per request batch caches the PRs it looked up."""

    def __init__(self, ctx: GatewayContext) -> None:
        self.ctx = ctx
        self._prs: dict[str, list[PullRequest]] = {}
        self._people: dict[tuple[str, int], set[str]] = {}

    async def can_read(self, principal: Principal, job: Job) -> bool:
        if principal.kind in SEE_ALL or principal.name == job.submitter:
            return True
        forge = self.ctx.services.find(FORGE)
        if forge is None:
            return False
        for number in await self._prs_of(forge, job):
            if principal.name in await self._participants(forge, job.repo, number):
                return True
        return False

    async def visible(self, principal: Principal, jobs: list[Job]) -> list[Job]:
        return [j for j in jobs if await self.can_read(principal, j)]

    async def _prs_of(self, forge: Forge, job: Job) -> list[int]:
        if job.repo not in self._prs:
            org, _, name = job.repo.partition("/")
            try:
                self._prs[job.repo] = await forge.list_prs(org, name, "all")
            except Exception:  # a missing repo or a forge error: no PR grants access
                self._prs[job.repo] = []
        numbers = {
            p.number for p in self._prs[job.repo] if p.head_sha == job.sha and p.author == job.submitter
        }
        if job.reproduce_pr is not None:
            numbers.add(job.reproduce_pr)
        return sorted(numbers)

    async def _participants(self, forge: Forge, repo: str, number: int) -> set[str]:
        key = (repo, number)
        if key not in self._people:
            org, _, name = repo.partition("/")
            try:
                pr = await forge.get_pr(org, name, number)
            except Exception:
                self._people[key] = set()
            else:
                people = {pr.author, *pr.requested_reviewers}
                self._people[key] = people
        return self._people[key]
