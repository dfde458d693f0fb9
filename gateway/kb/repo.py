"""Server-side access to a repository of the embedded forge: read a branch's files, seed a branch.

Both go straight to the bare repository with git plumbing, so they never pass the receive check:
reading is harmless, and seeding is how an operator-provided initial tree (the dataset template, the
knowledge base's first notes) lands on a protected ``main`` without opening a window in which the
branch is unprotected. Seeding only ever happens while ``main`` still holds nothing but the forge's
own initial commit, so it can never overwrite reviewed work.

With Gitea as the forge these helpers are not available (``ForgeError`` 501): there, create the repo,
push the initial tree, then protect the branch (docs/tasks.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.forge.embedded import EmbeddedForge
from gateway.forge.gitrepo import BareRepo, GitError, git_env
from gateway.forge.models import ForgeError
from gateway.forge.protocol import Forge

MAX_FILE_BYTES = 512 * 1024


@dataclass(frozen=True)
class RepoFile:
    path: str
    text: str


def bare_repo(forge: Forge, org: str, repo: str) -> BareRepo:
    """The bare repository behind ``org/repo``; 501 when the forge is not the embedded one."""
    if not isinstance(forge, EmbeddedForge):
        raise ForgeError("server-side repository access needs the embedded forge", 501)
    bare = forge.bare(org, repo)
    if not bare.exists():
        raise ForgeError(f"no repository {org}/{repo}", 404)
    return bare


async def read_tree(
    bare: BareRepo, sha: str, suffixes: tuple[str, ...] = (".md",), max_files: int = 2000
) -> list[RepoFile]:
    """Text files of commit ``sha`` whose names end in one of ``suffixes`` (each up to 512 KiB)."""
    listing = await bare.git("ls-tree", "-r", "-z", "--long", sha)
    wanted: list[tuple[str, str]] = []
    for entry in listing.split("\0"):
        if not entry:
            continue
        meta, _, path = entry.partition("\t")
        parts = meta.split()
        if len(parts) != 4 or parts[1] != "blob" or not path.lower().endswith(suffixes):
            continue
        if parts[3] == "-" or int(parts[3]) > MAX_FILE_BYTES:
            continue
        wanted.append((parts[2], path))
        if len(wanted) >= max_files:
            break
    if not wanted:
        return []
    batch = await _git_bytes(bare, "cat-file", "--batch", stdin="".join(f"{b}\n" for b, _ in wanted).encode())
    return [RepoFile(path, text) for (_, path), text in zip(wanted, _split_batch(batch), strict=True)]


async def _git_bytes(bare: BareRepo, *args: str, stdin: bytes | None = None) -> bytes:
    """Raw output of a git command (``BareRepo.git`` decodes, which would break byte sizes)."""
    proc = await asyncio.create_subprocess_exec(
        "git",
        f"--git-dir={bare.path}",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=git_env(),
    )
    out, err = await proc.communicate(stdin)
    if proc.returncode:
        raise GitError(f"git {' '.join(args)} failed ({proc.returncode}): {err.decode(errors='replace')}")
    return out


def _split_batch(data: bytes) -> list[str]:
    """The contents from ``git cat-file --batch`` output: per object a header line ``sha type size``,
    ``size`` bytes of content and a newline."""
    texts: list[str] = []
    pos = 0
    while pos < len(data):
        end = data.index(b"\n", pos)
        header = data[pos:end].split()
        start = end + 1
        if len(header) != 3:  # "<sha> missing": no content follows
            texts.append("")
            pos = start
            continue
        size = int(header[2])
        texts.append(data[start : start + size].decode(errors="replace"))
        pos = start + size + 1
    return texts


async def read_file(bare: BareRepo, sha: str, path: str) -> str | None:
    try:
        return await bare.git("show", f"{sha}:{path}")
    except GitError:
        return None


async def seed_branch(
    bare: BareRepo,
    branch: str,
    files: Mapping[str, bytes],
    message: str,
    name: str,
    email: str,
) -> str | None:
    """Commit ``files`` on top of ``branch`` when it holds only its initial commit; else do nothing.

    Returns the new commit, or None when the branch already has history (seeded or changed by PRs).
    The ref moves by compare-and-swap, so a concurrent seeder or merge makes this a no-op too."""
    head = await bare.branch_sha(branch)
    if head is None:
        raise ForgeError(f"branch {branch} does not exist", 404)
    if int((await bare.git("rev-list", "--count", head)).strip()) != 1:
        return None
    index_lines = []
    for path, content in sorted(files.items()):
        if path.startswith("/") or ".." in path.split("/"):
            raise ValueError(f"bad path in seed tree: {path!r}")
        blob = (await bare.git("hash-object", "-w", "--stdin", stdin=content)).strip()
        index_lines.append(f"100644 {blob}\t{path}\n")
    index = bare.path / f"kswarm-seed-{head[:12]}.index"
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        await bare.git("read-tree", head, env=env)
        await bare.git("update-index", "--index-info", env=env, stdin="".join(index_lines).encode())
        tree = (await bare.git("write-tree", env=env)).strip()
    finally:
        index.unlink(missing_ok=True)
    commit = await bare.commit_tree(tree, [head], message, name, email)
    if not await bare.update_ref(f"refs/heads/{branch}", commit, head, "kswarm seed"):
        return None
    return commit
