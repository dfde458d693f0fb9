"""The Gitea adapter's repository content: refs, commits, files and commits through Gitea's REST v1.

``resolve_ref``: ``GET /repos/{o}/{r}/branches/{ref}`` (a branch wins), then ``GET …/git/commits/{ref}``;
``read_file``: ``GET …/contents/{path}?ref=<sha>``; ``read_tree``: ``GET …/git/trees/{sha}?recursive=true``
(paged) and one ``GET …/git/blobs/{sha}`` per file; ``commit_files``: ``POST …/contents``
(change-files, as the actor with ``Sudo``), each path as ``create`` / ``update`` / ``delete`` with its
blob sha at the expected head (Gitea's only compare-and-swap: its API has no branch head check).
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import httpx

from gateway.errors import ForgeError
from gateway.forge.gitea import content_shapes as cshapes
from gateway.forge.models import MAX_FILE_BYTES, CommitInfo, RepoFile

TREE_PAGE = 1000
BLOB_FETCHES = 8  # blobs fetched at once


def path_part(value: str) -> str:
    """A ref or file path in a URL: every segment quoted, the slashes kept (Gitea routes ``*``)."""
    return quote(value.strip("/"), safe="/")


class GiteaContent:
    """A mixin of ``GiteaForge`` (``call`` is its authenticated request)."""

    async def call(
        self,
        method: str,
        path: str,
        *,
        actor: str | None = None,
        ok: Sequence[int] = (200, 201, 204),
        auth: tuple[str, str] | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        raise NotImplementedError

    async def _repo_exists(self, org: str, repo: str) -> None:
        await self.call("GET", f"/repos/{org}/{repo}")  # 404 -> ForgeError(404)

    async def resolve_ref(self, org: str, repo: str, ref: str) -> str | None:
        if not ref or "\n" in ref:
            return None
        base = f"/repos/{org}/{repo}"
        branch = await self.call("GET", f"{base}/branches/{path_part(ref)}", ok=(200, 404))
        if branch.status_code == 200:
            return str((branch.json().get("commit") or {}).get("id") or "") or None
        commit = await self.call(
            "GET",
            f"{base}/git/commits/{path_part(ref)}",
            params={"stat": "false", "verification": "false", "files": "false"},
            ok=(200, 404, 422),
        )
        if commit.status_code == 200:
            return str(commit.json().get("sha") or "") or None
        await self._repo_exists(org, repo)
        return None

    async def commit_reachable(self, org: str, repo: str, sha: str) -> bool:
        """Gitea's API does not say which refs contain a commit: whether it still has it is as near as
        it gets (a clone of a force-pushed-away commit fails at the worker, which says so)."""
        return await self.resolve_ref(org, repo, sha) == sha

    async def _sha(self, org: str, repo: str, ref: str) -> str:
        sha = await self.resolve_ref(org, repo, ref)
        if sha is None:
            raise ForgeError(f"no commit {ref!r} in {org}/{repo}", 404)
        return sha

    async def get_commit(self, org: str, repo: str, sha: str) -> CommitInfo:
        reply = await self.call(
            "GET",
            f"/repos/{org}/{repo}/git/commits/{path_part(sha)}",
            params={"stat": "false", "verification": "false", "files": "false"},
        )
        return cshapes.parse_commit(reply.json())

    async def read_file(
        self, org: str, repo: str, ref: str, path: str, max_bytes: int | None = None
    ) -> RepoFile | None:
        sha = await self._sha(org, repo, ref)
        if max_bytes is not None:  # the directory's listing has sizes and no content
            folder, _, _ = path.strip("/").rpartition("/")
            where = f"/repos/{org}/{repo}/contents" + (f"/{path_part(folder)}" if folder else "")
            listing = await self.call("GET", where, params={"ref": sha}, ok=(200, 404))
            found = listing.json() if listing.status_code == 200 else []
            for item in found if isinstance(found, list) else []:
                if item.get("path") == path.strip("/") and item.get("type") == "file":
                    if int(item.get("size") or 0) > max_bytes:
                        return RepoFile(
                            path=item["path"], sha=str(item.get("sha") or ""), size=int(item["size"])
                        )
        reply = await self.call(
            "GET", f"/repos/{org}/{repo}/contents/{path_part(path)}", params={"ref": sha}, ok=(200, 404)
        )
        return cshapes.parse_contents(reply.json()) if reply.status_code == 200 else None

    async def _tree(self, org: str, repo: str, sha: str) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = []
        for page in range(1, 10_000):
            reply = await self.call(
                "GET",
                f"/repos/{org}/{repo}/git/trees/{sha}",
                params={"recursive": "true", "page": page, "per_page": TREE_PAGE},
            )
            data = reply.json()
            batch = data.get("tree") or []
            entries.extend(batch)
            if not data.get("truncated") or not batch or len(entries) >= int(data.get("total_count") or 0):
                break
        return entries

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
        sha = await self._sha(org, repo, ref)
        start = prefix.strip("/") + "/" if prefix.strip("/") else ""
        wanted = tuple(s.lower() for s in suffixes)
        chosen = [
            e
            for e in await self._tree(org, repo, sha)
            if e.get("type") == "blob"
            and e.get("mode") in ("100644", "100755")
            and str(e.get("path", "")).startswith(start)
            and int(e.get("size") or 0) <= max_bytes
            and (not wanted or str(e["path"]).lower().endswith(wanted))
        ][:max_files]
        limit = asyncio.Semaphore(BLOB_FETCHES)

        async def fetch(entry: dict[str, Any]) -> RepoFile:
            async with limit:
                blob = (await self.call("GET", f"/repos/{org}/{repo}/git/blobs/{entry['sha']}")).json()
            content = cshapes.b64(blob.get("content"), entry["path"])
            return RepoFile(path=entry["path"], sha=entry["sha"], size=len(content), content=content)

        return list(await asyncio.gather(*(fetch(e) for e in chosen)))

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
        if not files:
            raise ForgeError("a commit needs at least one file", 422)
        head = await self.resolve_ref(org, repo, branch)
        if head is None:
            raise ForgeError(f"branch {branch!r} does not exist in {org}/{repo}", 404)
        if expected_head is not None and head != expected_head:
            raise ForgeError(f"{branch} moved to {head[:10]} (expected {expected_head[:10]})", 409)
        existing = {e["path"]: e["sha"] for e in await self._tree(org, repo, head) if e.get("type") == "blob"}
        operations = []
        for path, content in sorted(files.items()):
            sha = existing.get(path)
            if content is None:
                if sha is None:
                    raise ForgeError(f"{path} does not exist on {branch}", 404)
                operations.append({"operation": "delete", "path": path, "sha": sha})
                continue
            encoded = base64.b64encode(content).decode()
            op = {"operation": "update", "path": path, "content": encoded, "sha": sha} if sha else {
                "operation": "create", "path": path, "content": encoded}  # fmt: skip
            operations.append(op)
        body: dict[str, Any] = {"branch": branch, "message": message, "files": operations}
        if new_branch:
            body["new_branch"] = new_branch
        reply = await self.call("POST", f"/repos/{org}/{repo}/contents", actor=actor, json=body)
        commit = reply.json().get("commit") or {}
        if not commit.get("sha"):
            raise ForgeError("the forge answered a commit without its sha", 502)
        return str(commit["sha"])
