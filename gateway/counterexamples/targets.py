"""What a red-team agent may attack, and the domain its inputs must stay in.

``list_targets`` finds the accepted kernels of a task: each kernel file of the task that a PR merged into
main changed, at that PR's merged head, with a passing verify job recorded there (the same rule the
submission checks, ``CounterexampleService.check_target``); with ``targets: merged-and-open`` also the
kernels of open PRs' heads. ``task_domain`` reads the ``DOMAIN`` literal of the task's definition (the
dataset repo's trusted main, else the catalogue) without running any of it: ``ast.literal_eval`` of
the assignment.
"""

from __future__ import annotations

import ast
from typing import Any

from pydantic import BaseModel

from gateway.client.jobs.kernel_paths import candidate_of
from gateway.forge.gate.ledger import EvidenceLedger
from gateway.forge.models import PullRequest
from gateway.forge.protocol import Forge
from gateway.tasks.definitions import split_repo, task_definition

MAX_PRS = 100  # the newest merged PRs looked at


class Target(BaseModel):
    kernel: str
    sha: str
    pr: int
    author: str
    accepted: bool  # merged head with a passing verification (else an open PR's head)


def task_domain(source: str) -> dict[str, Any] | None:
    """The ``DOMAIN = {...}`` literal of a task.py, or None when it has none (or not a literal)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "DOMAIN" for t in node.targets
        ):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


async def read_domain(forge: Forge, repo: str, task: str) -> dict[str, Any] | None:
    definition = await task_definition(forge, repo, task)
    return task_domain(definition.content or "")


async def _kernels(forge: Forge, pr: PullRequest, task: str) -> list[str]:
    files = await forge.pr_files(pr.org, pr.repo, pr.number)
    out = []
    for changed in files:
        found = candidate_of(changed.path)
        if found is not None and found[0] == task and changed.status != "deleted":
            out.append(changed.path)
    return out


async def list_targets(
    forge: Forge, ledger: EvidenceLedger, repo: str, task: str, base: str, with_open: bool
) -> list[Target]:
    org, name = split_repo(repo)
    merged = [p for p in await forge.list_prs(org, name, "closed") if p.merged and p.base == base]
    merged.sort(key=lambda p: p.merged_at or 0, reverse=True)
    out: list[Target] = []
    for pr in merged[:MAX_PRS]:
        sha = pr.merged_head_sha or pr.head_sha
        if not sha:
            continue
        passed = {
            v.kernel for v in await ledger.for_sha(repo, sha) if v.kind == "verify" and v.outcome == "pass"
        }
        for kernel in await _kernels(forge, pr, task):
            if kernel in passed:
                out.append(Target(kernel=kernel, sha=sha, pr=pr.number, author=pr.author, accepted=True))
    if with_open:
        for pr in await forge.list_prs(org, name, "open"):
            if pr.base == base and pr.head_sha:
                for kernel in await _kernels(forge, pr, task):
                    out.append(
                        Target(kernel=kernel, sha=pr.head_sha, pr=pr.number, author=pr.author, accepted=False)
                    )
    return out
