"""Wire and storage models of the forge, shared by both Forge implementations and the gate."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

StatusState = Literal["pending", "success", "error", "failure", "warning"]
ReviewEvent = Literal["APPROVED", "REQUEST_CHANGES", "COMMENT", "PENDING"]
STATUS_STATES: tuple[str, ...] = ("pending", "success", "error", "failure", "warning")
# Gitea's review events (ReviewStateType): any other word is recorded as PENDING, as Gitea does.
REVIEW_EVENTS: tuple[str, ...] = ("APPROVED", "REQUEST_CHANGES", "COMMENT", "PENDING")
VERDICT_EVENTS: tuple[str, ...] = ("APPROVED", "REQUEST_CHANGES")
MAX_FILE_BYTES = 512 * 1024  # the largest file read_tree returns (larger ones are left out)
# A rendered diff's caps (ForgeSettings.diff_max_bytes / diff_max_file_bytes default to these).
DIFF_MAX_BYTES = 1024 * 1024
DIFF_MAX_FILE_BYTES = 256 * 1024
DIFF_TRUNCATED_HEADER = "X-Kswarm-Diff-Truncated"  # "true" on a .diff answer that left something out


class ForgeUser(BaseModel):
    name: str = Field(description="Login; equal to the principal name.")
    email: str = Field(description="The e-mail commits must carry.")
    token: str | None = Field(None, description="A fresh token (ensure_user only).")


class RepoInfo(BaseModel):
    org: str
    name: str
    default_branch: str = "main"
    clone_url: str = ""
    created: float = 0.0

    @property
    def full_name(self) -> str:
        return f"{self.org}/{self.name}"


class Review(BaseModel):
    id: int
    user: str = Field(description="Reviewer (from the token).")
    state: str = Field(description="APPROVED, REQUEST_CHANGES, COMMENT or PENDING (never counts).")
    body: str = ""
    commit_id: str = Field(description="Head sha the review was given on.")
    submitted: float = 0.0
    dismissed: bool = Field(False, description="Dismissed by a later push (approvals only).")
    stale: bool = Field(False, description="Given on an older head than the current one.")


class Comment(BaseModel):
    id: int
    user: str
    body: str
    created: float = 0.0


class CommitStatus(BaseModel):
    id: int = 0
    sha: str
    context: str
    state: str
    description: str = ""
    target_url: str = ""
    creator: str = Field("", description="Principal that set it (from the token).")
    created: float = 0.0


class PullRequest(BaseModel):
    """A PR. Stored fields plus live ones (head/base sha, mergeable, reviews, statuses) on reads."""

    org: str
    repo: str
    number: int
    title: str
    body: str = ""
    author: str
    head: str = Field(description="Head branch name (same repository).")
    base: str
    state: Literal["open", "closed"] = "open"
    merged: bool = False
    merge_sha: str | None = None
    merged_by: str | None = None
    merged_head_sha: str | None = Field(None, description="Head sha at merge time.")
    merge_base: str | None = Field(None, description="Base sha the merge was made on.")
    merged_at: float | None = Field(None, description="When the gate merged it.")
    closed_at: float | None = Field(None, description="When it was closed (merged or not).")
    requested_reviewers: list[str] = Field(default_factory=list)
    created: float = 0.0
    updated: float = 0.0
    # live, filled on reads
    head_sha: str | None = None
    base_sha: str | None = None
    mergeable: bool | None = Field(None, description="No conflicts with the base (None: unknown).")
    reviews: list[Review] = Field(default_factory=list)
    statuses: list[CommitStatus] = Field(default_factory=list, description="Latest per context, head sha.")

    @property
    def full_name(self) -> str:
        return f"{self.org}/{self.repo}"

    @property
    def ref(self) -> str:
        return f"{self.org}/{self.repo}#{self.number}"


ChangeStatus = Literal["added", "modified", "deleted"]


class ChangedFile(BaseModel):
    """One path a PR changes between its merge base and its head (a rename is a delete plus an add)."""

    path: str
    status: ChangeStatus


class MergeResult(BaseModel):
    merged: bool
    merge_sha: str | None = None
    message: str = ""


STORED_PR_FIELDS = {"head_sha", "base_sha", "mergeable", "reviews", "statuses"}


class CommitInfo(BaseModel):
    """One commit, as ``get_commit`` reads it."""

    sha: str
    parents: list[str] = Field(default_factory=list, description="Empty for a branch's initial commit.")
    tree: str = ""
    message: str = ""
    author_name: str = ""
    author_email: str = ""
    committer_email: str = ""
    created: float = 0.0


class RepoFile(BaseModel):
    """A regular file at a commit: its path, git blob sha and bytes."""

    path: str
    sha: str = Field(description="The git blob sha (what a cache of the file is keyed by).")
    size: int
    content: bytes = b""

    def text(self) -> str:
        return self.content.decode(errors="replace")
