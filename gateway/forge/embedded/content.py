"""The embedded forge's repository content: refs, commits, files and server-side commits.

``RepositoryContent`` is mixed into ``EmbeddedForge``; it is the half of the Forge protocol that the
knowledge base, seeding, task definitions and the job runner use instead of touching a bare repository.
A commit made here is a server-side write that no receive hook sees, so it applies the push rules
itself (``receive.py`` for pushes): a protected branch takes commits from the gate only (Gitea's push
whitelist, which ``protect_branch`` sets to the gate), an agent writes only under ``<agent>/``, and the
author and committer are always the actor. The ref moves by compare-and-swap.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from gateway.errors import ForgeError
from gateway.forge.embedded.store import ForgeStore
from gateway.forge.models import MAX_FILE_BYTES, CommitInfo, RepoFile, RepoInfo
from gateway.forge.names import check_branch
from gateway.git.aio import BareRepo, CommitMeta, check_tree_path
from gateway.principals import Principal, PrincipalKind

MAX_COMMIT_FILES = 5000


def commit_info(meta: CommitMeta) -> CommitInfo:
    return CommitInfo(
        sha=meta.sha,
        parents=meta.parents,
        tree=meta.tree,
        message=meta.message,
        author_name=meta.author_name,
        author_email=meta.author_email,
        committer_email=meta.committer_email,
        created=meta.committed,
    )


def write_refusal(principal: Principal, target: str, protected: set[str]) -> str | None:
    """Why ``principal`` may not commit to branch ``target`` (None: it may)."""
    if target in protected and principal.kind != PrincipalKind.gate:
        return f"{target} is protected: only the review gate writes to it (open a PR)"
    if principal.kind == PrincipalKind.agent and not target.startswith(f"{principal.name}/"):
        return f"agent {principal.name} may write only under {principal.name}/..., not {target!r}"
    return None


class RepositoryContent:
    """Refs, commits and files of the embedded forge's repositories (a mixin of ``EmbeddedForge``)."""

    root: Path
    store: ForgeStore

    def bare(self, org: str, repo: str) -> BareRepo:  # provided by EmbeddedForge
        raise NotImplementedError

    async def repo_info(self, org: str, repo: str) -> RepoInfo:
        raise NotImplementedError

    async def principal(self, name: str) -> Principal:
        raise NotImplementedError

    async def on_push(self, org: str, repo: str, pusher: str, updates: list[tuple[str, str, str]]) -> None:
        raise NotImplementedError

    async def _repo(self, org: str, repo: str) -> BareRepo:
        await self.repo_info(org, repo)
        bare = self.bare(org, repo)
        if not bare.exists():
            raise ForgeError(f"no repository {org}/{repo}", 404)
        return bare

    async def _commit_of(self, bare: BareRepo, org: str, repo: str, ref: str) -> str:
        sha = await bare.resolve(ref)
        if sha is None:
            raise ForgeError(f"no commit {ref!r} in {org}/{repo}", 404)
        return sha

    async def resolve_ref(self, org: str, repo: str, ref: str) -> str | None:
        return await (await self._repo(org, repo)).resolve(ref)

    async def commit_reachable(self, org: str, repo: str, sha: str) -> bool:
        bare = await self._repo(org, repo)
        return await bare.reachable(sha)

    async def get_commit(self, org: str, repo: str, sha: str) -> CommitInfo:
        bare = await self._repo(org, repo)
        meta = await bare.commit_info(await self._commit_of(bare, org, repo, sha))
        if meta is None:
            raise ForgeError(f"no commit {sha!r} in {org}/{repo}", 404)
        return commit_info(meta)

    async def read_file(
        self, org: str, repo: str, ref: str, path: str, max_bytes: int | None = None
    ) -> RepoFile | None:
        bare = await self._repo(org, repo)
        sha = await self._commit_of(bare, org, repo, ref)
        entry = await bare.entry(sha, path.strip("/"))
        if entry is None or entry.mode == "120000":  # a symlink is not a regular file
            return None
        if max_bytes is not None and entry.size > max_bytes:
            return RepoFile(path=entry.path, sha=entry.sha, size=entry.size)
        (content,) = await bare.read_blobs([entry.sha])
        return RepoFile(path=entry.path, sha=entry.sha, size=entry.size, content=content)

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
        bare = await self._repo(org, repo)
        sha = await self._commit_of(bare, org, repo, ref)
        wanted = tuple(s.lower() for s in suffixes)
        entries = [
            e
            for e in await bare.tree_entries(sha, prefix.strip("/"))
            if e.mode != "120000" and e.size <= max_bytes and (not wanted or e.path.lower().endswith(wanted))
        ][:max_files]
        contents = await bare.read_blobs([e.sha for e in entries])
        return [
            RepoFile(path=e.path, sha=e.sha, size=e.size, content=c)
            for e, c in zip(entries, contents, strict=True)
        ]

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
        principal = await self.principal(actor)
        bare = await self._repo(org, repo)
        if not files:
            raise ForgeError("a commit needs at least one file", 422)
        if len(files) > MAX_COMMIT_FILES:
            raise ForgeError(f"at most {MAX_COMMIT_FILES} files per commit", 422)
        for path in files:
            try:
                check_tree_path(path)
            except ValueError as exc:
                raise ForgeError(str(exc), 422) from None
        target = new_branch or branch
        check_branch(branch)
        check_branch(target)
        protected = set(await self.store.protections(f"{org}/{repo}"))
        refused = write_refusal(principal, target, protected)
        if refused:
            raise ForgeError(refused, 403)
        head = await bare.branch_sha(branch)
        if head is None:
            raise ForgeError(f"branch {branch!r} does not exist in {org}/{repo}", 404)
        if expected_head is not None and head != expected_head:
            raise ForgeError(f"{branch} moved to {head[:10]} (expected {expected_head[:10]})", 409)
        old = head
        if new_branch is not None:
            if await bare.branch_sha(new_branch) is not None:
                raise ForgeError(f"branch {new_branch!r} already exists", 422)
            old = "0" * 40
        for path, content in files.items():
            if content is None and await bare.entry(head, path) is None:
                raise ForgeError(f"{path} does not exist on {branch}", 404)
        try:
            commit = await bare.write_commit(
                head, files, message.strip() + "\n" if message.strip() else "Update files\n",
                principal.name, principal.email,
            )  # fmt: skip
        except ValueError as exc:
            raise ForgeError(str(exc), 422) from None
        ref = f"refs/heads/{target}"
        if not await bare.update_ref(ref, commit, old, f"commit by {actor} at {time.time():.0f}"):
            raise ForgeError(f"{target} moved while committing: try again", 409)
        await self.on_push(org, repo, actor, [(old, commit, ref)])
        return commit
