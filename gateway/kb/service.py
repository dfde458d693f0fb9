"""The knowledge base: a repo in the forge, searched only at its protected branch's head.

Notes change like code: a branch, a PR, a review, the gate's merge. Search reads the branch the gate
protects (``main``) and nothing else, so a note on an unmerged branch is never returned. The index
is keyed by that branch's head commit and rebuilt when the head moves (checked on every search: one
``resolve_ref``), so a merge is searchable on the next call. Everything goes through the Forge protocol
(``resolve_ref``, ``read_tree``, ``read_file``; seeding: ``gateway/forge/seed.py``), so the knowledge
base works the same on the embedded forge and on Gitea.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from gateway.context import GatewayContext
from gateway.errors import ForgeError
from gateway.forge.models import RepoInfo
from gateway.forge.protocol import Forge
from gateway.forge.seed import seed_branch
from gateway.kb.index import Bm25Index, split_passages
from gateway.services import FORGE

log = logging.getLogger("kswarm.kb")

SeedFiles = Callable[[], Mapping[str, bytes]]
HISTORY_CACHE = 256  # notes' histories kept (each a few KiB at most)


class KBSettings(BaseSettings):
    """Knowledge-base settings (environment prefix ``KSWARM_KB_``)."""

    model_config = SettingsConfigDict(env_prefix="KSWARM_KB_", extra="ignore")

    repo: str = Field("kswarm/kb", description="org/name of the knowledge repo in the forge.")
    branch: str = Field("main", description="The reviewed branch that search reads (protected).")
    ensure_on_start: bool = Field(
        False, description="Create and seed the repo at start; else on first use or POST /api/kb/seed."
    )
    seed: bool = Field(True, description="Seed a new repo with the project's notes (kb_seed/*.md).")
    suffixes: list[str] = Field(
        default_factory=lambda: [".md", ".markdown", ".txt", ".rst"], description="Files that are notes."
    )
    max_results: int = Field(20, ge=1, description="Most passages one search returns.")
    read_max_chars: int = Field(20_000, ge=100, description="Longest note text kb_read returns.")


def default_seed_files() -> Mapping[str, bytes]:
    from gateway.tasks.catalogue import kb_files

    return kb_files()


class KnowledgeBase:
    """Search and read the knowledge repo at its protected branch; one per gateway app."""

    def __init__(
        self, ctx: GatewayContext, settings: KBSettings, seed_files: SeedFiles | None = None
    ) -> None:
        self.ctx = ctx
        self.settings = settings
        self.seed_files = seed_files or default_seed_files
        org, _, name = settings.repo.partition("/")
        if not org or not name:
            raise ValueError(f"KSWARM_KB_REPO must be org/name, not {settings.repo!r}")
        self.org, self.name = org, name
        self._ensured = False
        self._lock = asyncio.Lock()
        self._cache: tuple[str, Bm25Index] | None = None
        # (head, path, limit) -> history: a head's history never changes; bounded, oldest dropped first
        self._histories: dict[tuple[str, str, int], list[dict[str, Any]]] = {}

    @property
    def forge(self) -> Forge:
        return self.ctx.services.get(FORGE)  # the kb plugin requires the forge plugin

    async def ensure(self) -> tuple[RepoInfo, str | None]:
        """Create the repo if missing and seed it while it is new; (repo, seed commit or None)."""
        info = await self.forge.ensure_repo(self.org, self.name, self.settings.branch)
        seeded = None
        if self.settings.seed:
            seeded = await seed_branch(
                self.forge,
                self.ctx.redis,
                self.org,
                self.name,
                self.settings.branch,
                self.seed_files(),
                "Seed the knowledge base\n",
            )
            if seeded:
                log.info("seeded %s with %s", self.settings.repo, seeded)
        self._ensured = True
        return info, seeded

    async def head(self) -> str:
        if not self._ensured:
            async with self._lock:
                if not self._ensured:
                    await self.ensure()
        branch = self.settings.branch
        if await self.forge.get_protection(self.org, self.name, branch) is None:
            raise ForgeError(
                f"{self.settings.repo}:{branch} is not protected, so its notes are not reviewed: "
                "the knowledge base serves only a branch the review gate guards",
                409,
            )
        sha = await self.forge.resolve_ref(self.org, self.name, branch)
        if sha is None:
            raise ForgeError(f"{self.settings.repo} has no branch {self.settings.branch}", 404)
        return sha

    async def index(self) -> tuple[str, Bm25Index]:
        """The index of the branch's current head (rebuilt when the head has moved)."""
        sha = await self.head()
        cached = self._cache
        if cached is not None and cached[0] == sha:
            return cached
        async with self._lock:
            if self._cache is not None and self._cache[0] == sha:
                return self._cache
            files = await self.forge.read_tree(
                self.org, self.name, sha, suffixes=tuple(s.lower() for s in self.settings.suffixes)
            )
            passages = [p for f in files for p in split_passages(f.path, f.text())]
            self._cache = (sha, Bm25Index(passages))
            log.info(
                "indexed %s@%s: %d files, %d passages",
                self.settings.repo,
                sha[:10],
                len(files),
                len(passages),
            )
            return self._cache

    async def search(self, query: str, limit: int = 5) -> dict[str, Any]:
        sha, index = await self.index()
        limit = max(1, min(limit, self.settings.max_results))
        results = [
            {
                "file": p.file,
                "line": p.line,
                "heading": p.heading,
                "score": score,
                "commit": sha,
                "text": p.text,
            }
            for score, p in index.search(query, limit)
        ]
        return {"repo": self.settings.repo, "branch": self.settings.branch, "commit": sha, "results": results}

    async def read(self, path: str) -> dict[str, Any]:
        sha = await self.head()
        found = await self.forge.read_file(self.org, self.name, sha, path.strip("/"))
        if found is None:
            raise ForgeError(f"no note {path!r} on {self.settings.branch} of {self.settings.repo}", 404)
        text = found.text()
        limit = self.settings.read_max_chars
        return {
            "repo": self.settings.repo,
            "file": path.strip("/"),
            "commit": sha,
            "text": text[:limit],
            "truncated": len(text) > limit,
        }

    async def info(self) -> dict[str, Any]:
        sha, index = await self.index()
        repo = await self.forge.ensure_repo(self.org, self.name, self.settings.branch)
        return {
            "repo": self.settings.repo,
            "branch": self.settings.branch,
            "commit": sha,
            "clone_url": repo.clone_url,
            "files": sorted({p.file for p in index.passages}),
            "passages": len(index.passages),
        }

    async def history(self, path: str, limit: int = 20, walk: int = 300) -> dict[str, Any]:
        """The commits on the protected branch that changed ``path`` (added, edited or removed it), newest
        first: its first-parent chain from the head, at most ``walk`` commits back, comparing the note's
        blob at each commit with its parent's (through the Forge protocol, so any forge answers)."""
        path = path.strip("/")
        sha = await self.head()
        key = (sha, path, limit)
        if key not in self._histories:
            self._histories[key] = await self._walk(sha, path, limit, walk)
            while len(self._histories) > HISTORY_CACHE:
                self._histories.pop(next(iter(self._histories)))
        return {"repo": self.settings.repo, "file": path, "commit": sha, "commits": self._histories[key]}

    async def _walk(self, sha: str, path: str, limit: int, walk: int) -> list[dict[str, Any]]:
        commits: list[dict[str, Any]] = []
        current: str | None = sha
        blob = await self._blob(current, path)
        for _ in range(walk):
            if current is None or len(commits) >= limit:
                break
            info = await self.forge.get_commit(self.org, self.name, current)
            parent = info.parents[0] if info.parents else None
            before = await self._blob(parent, path) if parent else None
            if blob != before:
                commits.append(
                    {
                        "sha": info.sha,
                        "message": info.message,
                        "author": info.author_name,
                        "author_email": info.author_email,
                        "created": info.created,
                        "change": "added" if before is None else ("removed" if blob is None else "edited"),
                    }
                )
            current, blob = parent, before
        return commits

    async def _blob(self, ref: str | None, path: str) -> str | None:
        if ref is None:
            return None
        found = await self.forge.read_file(self.org, self.name, ref, path, max_bytes=1)
        return found.sha if found is not None else None
