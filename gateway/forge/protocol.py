"""The Forge protocol: what kswarm needs from a forge, implemented by the embedded forge and Gitea.

Acting methods take ``actor``, the principal on whose behalf the gateway acts; the gateway derives it
from the caller's token and never from a request field. The embedded forge looks the principal up;
the Gitea adapter acts with its admin token and ``Sudo: <actor>``. Errors are ``ForgeError`` with
Gitea's HTTP status for the case (403 not allowed, 404 missing, 405 merge refused, 409 head out of
date or conflict, 422 invalid, e.g. self-approval).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from gateway.forge.models import (
    ChangedFile,
    Comment,
    CommitStatus,
    ForgeUser,
    MergeResult,
    PullRequest,
    RepoInfo,
    Review,
)
from gateway.forge.policy import ReviewPolicy


@runtime_checkable
class Forge(Protocol):
    kind: str  # "embedded" or "gitea"

    async def ensure_user(self, name: str, email: str, kind: str = "agent") -> ForgeUser:
        """Create the account if missing; always return a fresh token for it."""
        ...

    async def ensure_repo(self, org: str, name: str, default_branch: str = "main") -> RepoInfo:
        """Create the org and repo (with an initial commit on ``default_branch``) if missing."""
        ...

    async def list_repos(self, query: str = "") -> list[RepoInfo]: ...

    async def add_collaborator(self, org: str, repo: str, user: str, permission: str = "write") -> None: ...

    async def protect_branch(self, org: str, repo: str, branch: str, policy: ReviewPolicy) -> None:
        """Only the gate merges into ``branch``, under ``policy`` (create or replace the rule)."""
        ...

    async def get_protection(self, org: str, repo: str, branch: str) -> ReviewPolicy | None: ...

    async def open_pr(
        self,
        actor: str,
        org: str,
        repo: str,
        head: str,
        base: str,
        title: str,
        body: str = "",
        reviewers: Sequence[str] = (),
    ) -> PullRequest: ...

    async def list_prs(self, org: str, repo: str, state: str = "open") -> list[PullRequest]:
        """PRs with head_sha filled; reviews, statuses and mergeable may be left empty."""
        ...

    async def get_pr(self, org: str, repo: str, number: int) -> PullRequest:
        """One PR with head/base sha, mergeable, reviews and the head's latest statuses."""
        ...

    async def pr_diff(self, org: str, repo: str, number: int) -> str: ...

    async def pr_files(self, org: str, repo: str, number: int) -> list[ChangedFile]:
        """Every path the PR's head changes since its merge base with the base (renames split into a
        deletion and an addition); what the gate binds verification to."""
        ...

    async def compare_files(self, org: str, repo: str, base: str, head: str) -> list[ChangedFile]:
        """Every path ``head`` (a sha) changes since its merge base with ``base`` (a sha): with the
        PR's head as ``base`` and its base as ``head``, what the base changed since the PR forked."""
        ...

    async def request_reviewers(
        self, actor: str, org: str, repo: str, number: int, reviewers: Sequence[str]
    ) -> PullRequest: ...

    async def review(
        self, actor: str, org: str, repo: str, number: int, event: str, body: str = "", commit_id: str = ""
    ) -> Review:
        """APPROVED, REQUEST_CHANGES or COMMENT on the current head (409 when ``commit_id`` is given
        and the head has moved on); the author gets 422 for the first two."""
        ...

    async def comment(self, actor: str, org: str, repo: str, number: int, body: str) -> Comment: ...

    async def comments(self, org: str, repo: str, number: int) -> list[Comment]: ...

    async def set_status(
        self,
        actor: str,
        org: str,
        repo: str,
        sha: str,
        state: str,
        context: str,
        description: str = "",
        target_url: str = "",
    ) -> CommitStatus:
        """A commit status; only worker principals may set them (403 otherwise)."""
        ...

    async def merge(self, actor: str, org: str, repo: str, number: int, head_sha: str) -> MergeResult:
        """Merge at exactly ``head_sha`` (409 if the head moved); refused (405) while protection is unmet."""
        ...

    async def aclose(self) -> None: ...
