"""The PRs a job verified, for its page: bound the way the gate binds a job to a PR
(``gateway/forge/gate/coverage.py``): same repo, the PR's head is the job's sha, and the PR changes the
job's kernel. A PR whose branch the job was submitted on (``ref``) but whose head has moved on since is
listed too, as an earlier head of it (the gate no longer counts that job there). A commit's page lists
the PRs whose head it is (``prs_at_head``).
"""

from __future__ import annotations

from typing import Any

from gateway.errors import GatewayError
from gateway.ui.internal import InternalApi, has_route, segment

FORGE_PULLS = "/api/forge/pulls"


def pr_url(repo: str, number: int) -> str:
    org, _, name = repo.partition("/")
    return f"/ui/prs/{segment(org)}/{segment(name)}/{number}"


async def changes_kernel(forge: Any, repo: str, number: int, kernel: str) -> bool:
    """Whether PR ``number`` changes ``kernel`` (at its head); True when the forge cannot say."""
    files = getattr(forge, "pr_files", None)
    if forge is None or files is None:
        return True
    org, _, name = repo.partition("/")
    try:
        return any(f.path == kernel for f in await files(org, name, number))
    except GatewayError:
        return False


async def pulls_of(api: InternalApi, repo: str) -> list[dict[str, Any]]:
    """Every PR of ``repo`` (``org/name``), any state, as ``/api/forge/pulls`` lists them."""
    if "/" not in repo or not has_route(api.app, FORGE_PULLS):
        return []
    reply = await api.get(FORGE_PULLS, repo=repo, state="all")
    return [p for p in reply.json() if isinstance(p, dict)] if reply.ok else []


def pr_link(repo: str, pr: dict[str, Any], at_head: bool) -> dict[str, Any]:
    number = int(pr.get("number") or 0)
    return {
        "repo": repo,
        "number": number,
        "title": str(pr.get("title") or ""),
        "state": str(pr.get("state") or ""),
        "url": pr_url(repo, number),
        "at_head": at_head,
    }


async def prs_of_job(api: InternalApi, forge: Any, job: dict[str, Any]) -> list[dict[str, Any]]:
    """``[{repo, number, title, state, url, at_head}]``: the PRs whose head (``at_head``) or branch the job
    verified, that change its kernel."""
    repo, sha = str(job.get("repo") or ""), str(job.get("sha") or "")
    kernel, ref = str(job.get("kernel") or ""), str(job.get("ref") or "")
    if not sha:
        return []
    out = []
    for pr in await pulls_of(api, repo):
        at_head = pr.get("head_sha") == sha
        if not at_head and not (ref and pr.get("head") == ref):
            continue
        if kernel and not await changes_kernel(forge, repo, int(pr.get("number") or 0), kernel):
            continue
        out.append(pr_link(repo, pr, at_head))
    return sorted(out, key=lambda p: (not p["at_head"], -p["number"]))


async def prs_at_head(api: InternalApi, repo: str, sha: str) -> list[dict[str, Any]]:
    """The PRs of ``repo`` whose head is ``sha`` (a commit's page links them)."""
    return [pr_link(repo, pr, True) for pr in await pulls_of(api, repo) if pr.get("head_sha") == sha]
