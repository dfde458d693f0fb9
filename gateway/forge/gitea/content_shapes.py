"""Gitea v1 shapes of repository content, both ways (the embedded forge renders, the adapter parses).

``Branch`` (with a ``PayloadCommit``), ``Commit``, ``ContentsResponse``, ``GitTreeResponse``,
``GitBlobResponse`` and ``FilesResponse``, with the field names of Gitea's swagger.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from gateway.errors import ForgeError
from gateway.forge.gate.policy import ReviewPolicy
from gateway.forge.gitea.shapes import from_iso, iso
from gateway.forge.models import CommitInfo, RepoFile
from gateway.git.aio import TreeEntry

TYPE_OF_MODE = {
    "100644": "file",
    "100755": "file",
    "120000": "symlink",
    "160000": "submodule",
    "040000": "dir",
}


def _person(name: str, email: str, ts: float) -> dict[str, Any]:
    return {"name": name, "email": email, "date": iso(ts)}


def branch_json(branch: str, commit: CommitInfo, policy: ReviewPolicy | None, html: str) -> dict[str, Any]:
    """Gitea's ``Branch``: its head as a ``PayloadCommit`` and its protection in brief."""
    return {
        "name": branch,
        "commit": {
            "id": commit.sha,
            "message": commit.message,
            "url": f"{html}/commit/{commit.sha}",
            "author": {"name": commit.author_name, "email": commit.author_email, "username": ""},
            "committer": {"name": commit.author_name, "email": commit.committer_email, "username": ""},
            "verification": None,
            "timestamp": iso(commit.created),
            "added": None,
            "removed": None,
            "modified": None,
        },
        "protected": policy is not None,
        "required_approvals": policy.required_approvals if policy else 0,
        "enable_status_check": bool(policy and policy.required_checks),
        "status_check_contexts": list(policy.required_checks) if policy else [],
        "user_can_push": policy is None,
        "user_can_merge": policy is None,
        "effective_branch_protection_name": branch if policy else "",
    }


def commit_json(commit: CommitInfo, html: str) -> dict[str, Any]:
    """Gitea's ``Commit`` (``GET …/git/commits/{sha}``)."""
    return {
        "url": f"{html}/commit/{commit.sha}",
        "sha": commit.sha,
        "created": iso(commit.created),
        "html_url": f"{html}/commit/{commit.sha}",
        "commit": {
            "url": f"{html}/commit/{commit.sha}",
            "author": _person(commit.author_name, commit.author_email, commit.created),
            "committer": _person(commit.author_name, commit.committer_email, commit.created),
            "message": commit.message,
            "tree": {"url": "", "sha": commit.tree, "created": iso(commit.created)},
            "verification": None,
        },
        "author": None,
        "committer": None,
        "parents": [{"url": f"{html}/commit/{p}", "sha": p, "created": None} for p in commit.parents],
        "files": None,
        "stats": None,
    }


def _links(base_url: str, owner: str, repo: str, path: str, sha: str, kind: str, ref: str) -> dict[str, Any]:
    api = f"{base_url}/api/v1/repos/{owner}/{repo}"
    git = f"{api}/git/{'trees' if kind == 'dir' else 'blobs'}/{sha}"
    html = f"{base_url}/{owner}/{repo}/src/commit/{ref}/{path}"
    return {
        "url": f"{api}/contents/{path}?ref={ref}",
        "html_url": html,
        "git_url": git,
        "download_url": f"{base_url}/{owner}/{repo}/raw/commit/{ref}/{path}" if kind == "file" else None,
        "_links": {"self": f"{api}/contents/{path}?ref={ref}", "git": git, "html": html},
    }


def contents_json(
    entry: TreeEntry, content: bytes, ref: str, base_url: str, owner: str, repo: str
) -> dict[str, Any]:
    """A file's (or symlink's) ``ContentsResponse`` at commit ``ref``."""
    kind = TYPE_OF_MODE.get(entry.mode, "file")
    out: dict[str, Any] = {
        "name": entry.path.rsplit("/", 1)[-1],
        "path": entry.path,
        "sha": entry.sha,
        "last_commit_sha": None,
        "type": kind,
        "size": entry.size,
        "encoding": "base64" if kind == "file" else None,
        "content": base64.b64encode(content).decode() if kind == "file" else None,
        "target": content.decode(errors="replace") if kind == "symlink" else None,
        "submodule_git_url": None,
    }
    out.update(_links(base_url, owner, repo, entry.path, entry.sha, kind, ref))
    return out


def listing_json(
    entry: tuple[str, str, str, int, str], ref: str, base_url: str, owner: str, repo: str
) -> dict[str, Any]:
    """One entry of a directory listing (no content, as Gitea lists)."""
    mode, kind, sha, size, path = entry
    typ = "dir" if kind == "tree" else TYPE_OF_MODE.get(mode, "file")
    out: dict[str, Any] = {
        "name": path.rsplit("/", 1)[-1],
        "path": path,
        "sha": sha,
        "type": typ,
        "size": size,
        "encoding": None,
        "content": None,
        "target": None,
        "submodule_git_url": None,
    }
    out.update(_links(base_url, owner, repo, path, sha, typ, ref))
    return out


def tree_json(
    sha: str,
    entries: list[tuple[str, str, str, int, str]],
    page: int,
    total: int,
    truncated: bool,
    base_url: str,
    owner: str,
    repo: str,
) -> dict[str, Any]:
    api = f"{base_url}/api/v1/repos/{owner}/{repo}/git"
    return {
        "sha": sha,
        "url": f"{api}/trees/{sha}",
        "tree": [
            {
                "path": path,
                "mode": mode,
                "type": kind,
                "size": size,
                "sha": obj,
                "url": f"{api}/{'trees' if kind == 'tree' else 'blobs'}/{obj}",
            }
            for mode, kind, obj, size, path in entries
        ],
        "truncated": truncated,
        "page": page,
        "total_count": total,
    }


def blob_json(sha: str, content: bytes, base_url: str, owner: str, repo: str) -> dict[str, Any]:
    return {
        "content": base64.b64encode(content).decode(),
        "encoding": "base64",
        "url": f"{base_url}/api/v1/repos/{owner}/{repo}/git/blobs/{sha}",
        "sha": sha,
        "size": len(content),
    }


def files_json(
    commit: CommitInfo, entries: list[TreeEntry], base_url: str, owner: str, repo: str
) -> dict[str, Any]:
    """Gitea's ``FilesResponse`` after a change-files commit."""
    html = f"{base_url}/{owner}/{repo}"
    return {
        "files": [
            {**listing_json((e.mode, "blob", e.sha, e.size, e.path), commit.sha, base_url, owner, repo)}
            for e in entries
        ],
        "commit": {
            "url": f"{html}/commit/{commit.sha}",
            "sha": commit.sha,
            "created": iso(commit.created),
            "html_url": f"{html}/commit/{commit.sha}",
            "author": _person(commit.author_name, commit.author_email, commit.created),
            "committer": _person(commit.author_name, commit.committer_email, commit.created),
            "parents": [{"url": f"{html}/commit/{p}", "sha": p, "created": None} for p in commit.parents],
            "message": commit.message,
            "tree": {"url": "", "sha": commit.tree, "created": iso(commit.created)},
        },
        "verification": None,
    }


# -- parsing (the adapter) -------------------------------------------------------------------------


def parse_commit(data: dict[str, Any]) -> CommitInfo:
    inner = data.get("commit") or {}
    author, committer = inner.get("author") or {}, inner.get("committer") or {}
    return CommitInfo(
        sha=data["sha"],
        parents=[p["sha"] for p in data.get("parents") or [] if p.get("sha")],
        tree=(inner.get("tree") or {}).get("sha", ""),
        message=inner.get("message") or "",
        author_name=author.get("name") or "",
        author_email=author.get("email") or "",
        committer_email=committer.get("email") or "",
        created=from_iso(committer.get("date") or data.get("created")),
    )


def b64(value: str | None, what: str) -> bytes:
    try:
        return base64.b64decode(value or "", validate=False)
    except (binascii.Error, ValueError):
        raise ForgeError(f"the forge sent undecodable content for {what}", 502) from None


def parse_contents(data: Any) -> RepoFile | None:
    """A regular file from a ``ContentsResponse`` (a directory listing or a symlink: None)."""
    if not isinstance(data, dict) or data.get("type") != "file":
        return None
    content = b64(data.get("content"), data.get("path", "?"))
    return RepoFile(
        path=data["path"], sha=data["sha"], size=int(data.get("size") or len(content)), content=content
    )
