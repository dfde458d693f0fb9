"""The Forge protocol: what kswarm needs from a forge, implemented by the embedded forge and Gitea.

Acting methods take ``actor``, the principal on whose behalf the gateway acts; the gateway derives it
from the caller's token and never from a request field. The embedded forge looks the principal up;
the Gitea adapter acts with its admin token and ``Sudo: <actor>``. Errors are ``ForgeError`` with
Gitea's HTTP status for the case (403 not allowed, 404 missing, 405 merge refused, 409 head out of
date or conflict, 422 invalid, e.g. self-approval).

Repository content (``resolve_ref``, ``get_commit``, ``read_file``, ``read_tree``, ``commit_files``) is
what the knowledge base, the task seeding and definitions and the job runner need: no code outside the
embedded forge touches a repository on disk, so every component works the same with Gitea.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from gateway.forge.models import (
    DIFF_MAX_BYTES,
    DIFF_MAX_FILE_BYTES,
    MAX_FILE_BYTES,
    ChangedFile,
    Comment,
    CommitInfo,
    CommitStatus,
    ForgeUser,
    MergeResult,
    PullRequest,
    RepoFile,
    RepoInfo,
    Review,
)
from gateway.git.diffcut import CutDiff

if TYPE_CHECKING:  # annotations only: the gate's package imports this protocol
    from gateway.forge.gate.policy import ReviewPolicy


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

    async def pr_diff(
        self,
        org: str,
        repo: str,
        number: int,
        max_bytes: int = DIFF_MAX_BYTES,
        max_file_bytes: int = DIFF_MAX_FILE_BYTES,
    ) -> CutDiff:
        """The PR's diff (merge base .. head), cut while it is read: at most ``max_bytes`` (then a
        trailing ``... diff cut at`` marker), a file over ``max_file_bytes`` as its ``diff --git``
        line and a ``... file diff too large`` marker; ``truncated`` says whether anything was left out.
        Never reads the whole diff first (``gateway/git/diffcut.py``)."""
        ...

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

    # -- repository content -------------------------------------------------------------------

    async def resolve_ref(self, org: str, repo: str, ref: str) -> str | None:
        """The commit ``ref`` names: a branch first (``refs/heads/<ref>``), then a tag or a full sha;
        None when it names no commit (404 when the repository does not exist)."""
        ...

    async def commit_reachable(self, org: str, repo: str, sha: str) -> bool:
        """Whether commit ``sha`` can still be fetched by a clone: it exists and a branch, tag or PR ref
        contains it (after a force-push or a deleted branch it may not, and a gc removes it)."""
        ...

    async def get_commit(self, org: str, repo: str, sha: str) -> CommitInfo:
        """One commit (its parents: none for a branch's initial commit); 404 when missing."""
        ...

    async def read_file(
        self, org: str, repo: str, ref: str, path: str, max_bytes: int | None = None
    ) -> RepoFile | None:
        """The regular file ``path`` at ``ref`` (a branch or a sha); None when there is none there (a
        missing path, a directory, a submodule); 404 when ``ref`` names no commit. With ``max_bytes``,
        a larger file comes with its size and blob sha but no content (it is never read)."""
        ...

    async def read_tree(
        self,
        org: str,
        repo: str,
        ref: str,
        prefix: str = "",
        suffixes: Sequence[str] = (),
        max_bytes: int = MAX_FILE_BYTES,
        max_files: int = 2000,
    ) -> list[RepoFile]:
        """Every regular file at ``ref`` under ``prefix`` whose name ends in one of ``suffixes`` (any,
        when empty), with its content; files over ``max_bytes`` are left out."""
        ...

    async def commit_files(
        self,
        actor: str,
        org: str,
        repo: str,
        branch: str,
        files: Mapping[str, bytes | None],
        message: str,
        *,
        expected_head: str | None = None,
        new_branch: str | None = None,
    ) -> str:
        """One commit by ``actor`` (its identity, author and committer) on ``branch``, or on
        ``new_branch`` created from it, writing ``files`` (None deletes a path); returns its sha.

        The push rules hold as for a push: a protected branch takes commits from the gate only (403),
        an agent writes only its own ``<agent>/...`` branches (403). ``expected_head``: only while
        ``branch`` still points there (409 otherwise); the embedded forge compares and swaps the ref,
        Gitea (whose API has no such check) gets every changed path's blob sha as of that head, so a
        concurrent change of any of those paths fails there (callers needing more hold the branch's
        merge lock, ``gateway/forge/locks.py``)."""
        ...

    async def aclose(self) -> None: ...
