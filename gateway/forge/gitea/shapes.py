"""Gitea v1 JSON shapes, both ways: forge models -> Gitea answers, Gitea answers -> forge models.

The embedded forge's ``/api/v1`` routes render with the ``*_json`` functions; the Gitea adapter parses
with the ``parse_*`` ones, so the adapter's tests against the embedded forge exercise both directions.
Field names follow Gitea's swagger (note: a single commit status carries ``status``, not ``state``).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from gateway.errors import ForgeError
from gateway.forge.gate.policy import ReviewPolicy
from gateway.forge.models import ChangedFile, Comment, CommitStatus, PullRequest, RepoInfo, Review


def iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if ts else None


def from_iso(value: str | None) -> float:
    if not value:
        return 0.0
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def user_id(name: str) -> int:
    return int(hashlib.sha1(name.encode()).hexdigest()[:8], 16)  # stable ids without a table


GITEA_VERSION = "1.22.0+kswarm-embedded"  # the Gitea API level these routes follow (ServerVersion)


def user_json(name: str, email: str = "", admin: bool = False) -> dict[str, Any]:
    return {
        "id": user_id(name),
        "login": name,
        "login_name": "",
        "username": name,
        "full_name": name,
        "email": email,
        "avatar_url": "",
        "is_admin": admin,
        "active": True,
        "restricted": False,
        "prohibit_login": False,
        "visibility": "public",
    }


def org_json(name: str) -> dict[str, Any]:
    """Gitea's ``Organization`` (``name`` and ``username``, no ``login``)."""
    return {
        "id": user_id(name),
        "name": name,
        "username": name,
        "full_name": name,
        "email": "",
        "avatar_url": "",
        "description": "",
        "website": "",
        "location": "",
        "visibility": "public",
        "repo_admin_change_team_access": False,
    }


def repo_json(info: RepoInfo, base_url: str) -> dict[str, Any]:
    return {
        "id": user_id(info.full_name),
        "name": info.name,
        "full_name": info.full_name,
        "owner": user_json(info.org),
        "default_branch": info.default_branch,
        "clone_url": info.clone_url,
        "html_url": f"{base_url}/{info.full_name}",
        "url": f"{base_url}/api/v1/repos/{info.full_name}",
        "private": False,
        "fork": False,
        "mirror": False,
        "archived": False,
        "empty": False,
        "has_pull_requests": True,
        "created_at": iso(info.created),
        "updated_at": iso(info.created),
    }


def parse_repo(data: dict[str, Any]) -> RepoInfo:
    org, _, name = data["full_name"].partition("/")
    return RepoInfo(
        org=org,
        name=name,
        default_branch=data.get("default_branch") or "main",
        clone_url=data.get("clone_url", ""),
        created=from_iso(data.get("created_at")),
    )


def review_json(review: Review) -> dict[str, Any]:
    """Gitea's ``PullReview``."""
    return {
        "id": review.id,
        "user": user_json(review.user),
        "team": None,
        "state": review.state,
        "body": review.body,
        "commit_id": review.commit_id,
        "stale": review.stale,
        "dismissed": review.dismissed,
        "official": review.state in ("APPROVED", "REQUEST_CHANGES"),
        "comments_count": 0,
        "submitted_at": iso(review.submitted),
        "updated_at": iso(review.submitted),
    }


def review_request_json(name: str) -> dict[str, Any]:
    """What ``POST …/requested_reviewers`` answers per reviewer: a ``PullReview`` in REQUEST_REVIEW."""
    return {
        "id": user_id(f"request:{name}"),
        "user": user_json(name),
        "team": None,
        "state": "REQUEST_REVIEW",
        "body": "",
        "commit_id": "",
        "stale": False,
        "dismissed": False,
        "official": False,
        "comments_count": 0,
        "submitted_at": None,
        "updated_at": None,
    }


def parse_review(data: dict[str, Any]) -> Review:
    return Review(
        id=data["id"],
        user=(data.get("user") or {}).get("login", ""),
        state=data.get("state", ""),
        body=data.get("body", ""),
        commit_id=data.get("commit_id", ""),
        submitted=from_iso(data.get("submitted_at")),
        dismissed=bool(data.get("dismissed")),
        stale=bool(data.get("stale")),
    )


def status_json(status: CommitStatus) -> dict[str, Any]:
    return {
        "id": status.id,
        "url": "",
        "status": status.state,
        "context": status.context,
        "description": status.description,
        "target_url": status.target_url,
        "creator": user_json(status.creator),
        "created_at": iso(status.created),
        "updated_at": iso(status.created),
    }


def parse_status(data: dict[str, Any], sha: str) -> CommitStatus:
    return CommitStatus(
        id=data.get("id", 0),
        sha=sha,
        context=data.get("context", ""),
        state=data.get("status") or data.get("state") or "",
        description=data.get("description", ""),
        target_url=data.get("target_url", ""),
        creator=(data.get("creator") or {}).get("login", ""),
        created=from_iso(data.get("created_at")),
    )


def combined_state(statuses: list[CommitStatus]) -> str:
    states = {s.state for s in statuses}
    for worst in ("error", "failure", "pending", "warning"):
        if worst in states:
            return worst
    return "success" if statuses else "pending"


def combined_json(sha: str, statuses: list[CommitStatus]) -> dict[str, Any]:
    return {
        "state": combined_state(statuses),
        "sha": sha,
        "total_count": len(statuses),
        "statuses": [status_json(s) for s in statuses],
        "commit_url": "",
        "url": "",
    }


def comment_json(comment: Comment) -> dict[str, Any]:
    return {
        "id": comment.id,
        "user": user_json(comment.user),
        "body": comment.body,
        "created_at": iso(comment.created),
        "updated_at": iso(comment.created),
    }


def parse_comment(data: dict[str, Any]) -> Comment:
    return Comment(
        id=data["id"],
        user=(data.get("user") or {}).get("login", ""),
        body=data.get("body", ""),
        created=from_iso(data.get("created_at")),
    )


def pr_json(pr: PullRequest, base_url: str) -> dict[str, Any]:
    """Gitea's ``PullRequest``; the list and the single view render the same (``mergeable`` included)."""
    repo_id = user_id(pr.full_name)
    return {
        "id": user_id(f"{pr.full_name}#{pr.number}"),
        "url": f"{base_url}/{pr.full_name}/pulls/{pr.number}",
        "number": pr.number,
        "title": pr.title,
        "body": pr.body,
        "state": pr.state,
        "user": user_json(pr.author),
        "labels": [],
        "milestone": None,
        "assignee": None,
        "assignees": [],
        "is_locked": False,
        "draft": False,
        "comments": 0,
        "head": {"ref": pr.head, "sha": pr.head_sha, "label": pr.head, "repo_id": repo_id},
        "base": {"ref": pr.base, "sha": pr.base_sha, "label": pr.base, "repo_id": repo_id},
        "mergeable": bool(pr.mergeable),
        "merged": pr.merged,
        "merged_at": iso(pr.merged_at),
        "merge_commit_sha": pr.merge_sha,
        "merged_by": user_json(pr.merged_by) if pr.merged_by else None,
        "merge_base": pr.merge_base,
        "requested_reviewers": [user_json(n) for n in pr.requested_reviewers],
        "html_url": f"{base_url}/{pr.full_name}/pulls/{pr.number}",
        "diff_url": f"{base_url}/{pr.full_name}/pulls/{pr.number}.diff",
        "patch_url": f"{base_url}/{pr.full_name}/pulls/{pr.number}.patch",
        "due_date": None,
        "created_at": iso(pr.created),
        "updated_at": iso(pr.updated),
        "closed_at": iso(pr.closed_at),
    }


def parse_pr(data: dict[str, Any], org: str, repo: str) -> PullRequest:
    head, base = data.get("head") or {}, data.get("base") or {}
    merged_by = data.get("merged_by") or {}
    return PullRequest(
        org=org,
        repo=repo,
        number=data["number"],
        title=data.get("title", ""),
        body=data.get("body") or "",
        author=(data.get("user") or {}).get("login", ""),
        head=head.get("ref", ""),
        base=base.get("ref", ""),
        state="closed" if data.get("state") == "closed" else "open",
        merged=bool(data.get("merged")),
        merge_sha=data.get("merge_commit_sha"),
        merged_by=merged_by.get("login"),
        merge_base=data.get("merge_base"),
        merged_at=from_iso(data.get("merged_at")) or None,
        closed_at=from_iso(data.get("closed_at")) or None,
        requested_reviewers=[u.get("login", "") for u in data.get("requested_reviewers") or []],
        created=from_iso(data.get("created_at")),
        updated=from_iso(data.get("updated_at")),
        head_sha=head.get("sha"),
        base_sha=base.get("sha"),
        mergeable=data.get("mergeable"),
    )


def protection_json(branch: str, policy: ReviewPolicy, gate: str = "gate") -> dict[str, Any]:
    """Gitea's ``BranchProtection`` for a kswarm-protected branch: only ``gate`` pushes (kswarm's
    server-side writes: seeding, task definitions) and merges; approvals and status checks as the
    policy says. kswarm's own rules (reproduction, dataset paths, human approvals) are not Gitea
    fields: the adapter keeps them in the gateway's Redis (``gitea_policy.py``)."""
    return {
        "rule_name": branch,
        "branch_name": branch,
        "priority": 0,
        "enable_push": True,
        "enable_push_whitelist": True,
        "push_whitelist_usernames": [gate],
        "push_whitelist_teams": [],
        "push_whitelist_deploy_keys": False,
        "enable_force_push": False,
        "enable_force_push_allowlist": False,
        "force_push_allowlist_usernames": [],
        "force_push_allowlist_teams": [],
        "force_push_allowlist_deploy_keys": False,
        "enable_merge_whitelist": True,
        "merge_whitelist_usernames": [gate],
        "merge_whitelist_teams": [],
        "enable_status_check": bool(policy.required_checks),
        "status_check_contexts": list(policy.required_checks),
        "required_approvals": policy.required_approvals,
        "enable_approvals_whitelist": False,
        "approvals_whitelist_username": [],
        "approvals_whitelist_teams": [],
        "block_on_rejected_reviews": True,
        "block_on_official_review_requests": False,
        "block_on_outdated_branch": False,
        "dismiss_stale_approvals": True,
        "ignore_stale_approvals": False,
        "require_signed_commits": False,
        "protected_file_patterns": "",
        "unprotected_file_patterns": "",
        "block_admin_merge_override": True,
    }


def parse_protection(data: dict[str, Any]) -> ReviewPolicy:
    """The part of a ``ReviewPolicy`` that Gitea stores (approvals, required status checks)."""
    checks = (data.get("status_check_contexts") or []) if data.get("enable_status_check", True) else []
    branch = data.get("rule_name") or data.get("branch_name") or "main"
    return ReviewPolicy(
        required_approvals=int(data.get("required_approvals") or 0),
        required_checks=list(checks),
        protected_branches=[branch],
    )


def changed_file_json(changed: ChangedFile) -> dict[str, Any]:
    """Gitea's ``ChangedFile`` (the fields kswarm reads, plus the counters as zeros)."""
    return {
        "filename": changed.path,
        "previous_filename": "",
        "status": changed.status,
        "additions": 0,
        "deletions": 0,
        "changes": 0,
    }


def parse_changed_file(data: dict[str, Any]) -> list[ChangedFile]:
    """Gitea's ``ChangedFile`` as kswarm's: a rename is the old path deleted plus the new one added;
    an unknown status counts as a modification (it still needs verification)."""
    path = str(data.get("filename") or "")
    status = str(data.get("status") or "modified")
    if not path:
        return []
    if status in ("renamed", "copied"):
        previous = str(data.get("previous_filename") or "")
        gone = [ChangedFile(path=previous, status="deleted")] if previous and status == "renamed" else []
        return [*gone, ChangedFile(path=path, status="added")]
    if status in ("added", "deleted"):
        return [ChangedFile(path=path, status=status)]
    return [ChangedFile(path=path, status="modified")]


def compare_json(sha_base: str, sha_head: str, files: list[ChangedFile]) -> dict[str, Any]:
    """Gitea's ``Compare``: the commits base..head; the embedded forge reports the net changed files
    on one synthetic entry per file under ``commits[].files`` (the field the adapter reads)."""
    return {
        "total_commits": 1 if files else 0,
        "commits": [{"sha": sha_head, "files": [{"filename": f.path, "status": f.status} for f in files]}]
        if files
        else [],
    }


def parse_compare_files(data: dict[str, Any]) -> list[ChangedFile]:
    """The union of the paths the compared commits touch (Gitea's ``commits[].files``); a path any
    commit touched counts as modified unless every mention agrees on added or deleted."""
    seen: dict[str, set[str]] = {}
    commits = data.get("commits") or []
    if commits and all("files" not in c for c in commits):
        # A Gitea that lists no files per commit: fail closed rather than call the base unchanged.
        raise ForgeError("the forge's compare lists no files: cannot tell what the base changed", 501)
    for commit in commits:
        for entry in commit.get("files") or []:
            path = str(entry.get("filename") or "")
            if path:
                seen.setdefault(path, set()).add(str(entry.get("status") or "modified"))
    out = []
    for path, states in sorted(seen.items()):
        status = next(iter(states)) if len(states) == 1 else "modified"
        out.append(ChangedFile(path=path, status=status if status in ("added", "deleted") else "modified"))
    return out
