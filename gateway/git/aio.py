"""The asyncio side of the git layer: git as asyncio subprocesses, for the gateway, which must not
block its event loop (the embedded forge's bare repositories, smart HTTP, the KB's reads).

``BareRepo`` reads and seeds a bare repository with plumbing, never through the receive check:
reading is harmless, and seeding is how an operator-provided initial tree (the dataset template, the
knowledge base's first notes) lands on a protected ``main`` without a window in which the branch is
unprotected. Seeding only ever happens while the branch holds nothing but its initial commit, so it
can never overwrite reviewed work.
"""

from __future__ import annotations

import asyncio
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gateway.git.core import GitError, git_env

ZERO_SHA = "0" * 40
MAX_FILE_BYTES = 512 * 1024  # the largest file read_tree returns
RECEIVE_SCRIPT = Path(__file__).resolve().parents[1] / "forge" / "receive.py"


@dataclass(frozen=True)
class RepoFile:
    path: str
    text: str


@dataclass
class GitResult:
    rc: int
    out: str
    err: str


async def run_git(
    *args: str, git_dir: Path | None = None, env: dict[str, str] | None = None, stdin: bytes | None = None
) -> GitResult:
    argv = ["git", *([f"--git-dir={git_dir}"] if git_dir else []), *args]
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=git_env(env),
    )
    out, err = await proc.communicate(stdin)
    return GitResult(proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace"))


async def run_git_bytes(*args: str, git_dir: Path, stdin: bytes | None = None) -> bytes:
    """Raw output of a git command (decoding would break byte sizes, e.g. of ``cat-file --batch``)."""
    proc = await asyncio.create_subprocess_exec(
        "git",
        f"--git-dir={git_dir}",
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


class BareRepo:
    """One bare repository ``<root>/<org>/<name>.git``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    async def git(self, *args: str, env: dict[str, str] | None = None, stdin: bytes | None = None) -> str:
        result = await run_git(*args, git_dir=self.path, env=env, stdin=stdin)
        if result.rc != 0:
            raise GitError(f"git {' '.join(args)} failed ({result.rc}): {result.err.strip()}")
        return result.out

    def exists(self) -> bool:
        return (self.path / "HEAD").is_file()

    async def init(self, default_branch: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        result = await run_git("init", "--bare", "-q", "-b", default_branch, str(self.path))
        if result.rc != 0:
            raise GitError(f"git init failed: {result.err.strip()}")
        for key, value in (
            ("http.receivepack", "true"),  # pushes over smart HTTP; the hook enforces who may push what
            ("http.uploadpack", "true"),
            ("receive.denyNonFastForwards", "false"),  # decided per ref by the hook
            ("core.logAllRefUpdates", "always"),  # reflogs keep an audit trail of ref moves
            ("uploadpack.allowAnySHA1InWant", "false"),
        ):
            await self.git("config", key, value)
        self.install_hooks()

    def install_hooks(self) -> None:
        """(Re)write the hooks; they run receive.py with this gateway's interpreter."""
        hooks = self.path / "hooks"
        hooks.mkdir(exist_ok=True)
        for sample in hooks.glob("*.sample"):
            sample.unlink(missing_ok=True)
        python = shlex.quote(sys.executable)
        script = shlex.quote(str(RECEIVE_SCRIPT))
        for name in ("pre-receive", "post-receive"):
            hook = hooks / name
            tmp = hook.with_suffix(".tmp")
            tmp.write_text(f"#!/bin/sh\nexec {python} -I -S {script} {name}\n")
            tmp.chmod(0o755)
            tmp.replace(hook)

    async def rev_parse(self, ref: str) -> str | None:
        result = await run_git("rev-parse", "--verify", "-q", f"{ref}^{{commit}}", git_dir=self.path)
        return result.out.strip() if result.rc == 0 and result.out.strip() else None

    async def branch_sha(self, branch: str) -> str | None:
        return await self.rev_parse(f"refs/heads/{branch}")

    async def merge_base(self, a: str, b: str) -> str | None:
        result = await run_git("merge-base", a, b, git_dir=self.path)
        return result.out.strip() if result.rc == 0 else None

    async def merge_tree(self, base: str, head: str) -> tuple[bool, str | None]:
        """(clean, tree): a three-way merge without a work tree (git >= 2.38)."""
        result = await run_git("merge-tree", "--write-tree", "--no-messages", base, head, git_dir=self.path)
        if result.rc == 0:
            return True, result.out.split()[0]
        if result.rc == 1:
            return False, None
        raise GitError(f"git merge-tree failed ({result.rc}): {result.err.strip()}")

    async def commit_tree(self, tree: str, parents: list[str], message: str, name: str, email: str) -> str:
        identity = {
            "GIT_AUTHOR_NAME": name,
            "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": name,
            "GIT_COMMITTER_EMAIL": email,
        }
        args = ["commit-tree", tree]
        for parent in parents:
            args += ["-p", parent]
        return (await self.git(*args, env=identity, stdin=message.encode())).strip()

    async def update_ref(self, ref: str, new: str, old: str, message: str) -> bool:
        """Compare-and-swap a ref: False when it no longer points at ``old``."""
        result = await run_git("update-ref", "-m", message, ref, new, old, git_dir=self.path)
        return result.rc == 0

    async def write_initial_commit(self, branch: str, title: str, name: str, email: str) -> str:
        blob = (await self.git("hash-object", "-w", "--stdin", stdin=f"# {title}\n".encode())).strip()
        tree = (await self.git("mktree", stdin=f"100644 blob {blob}\tREADME.md\n".encode())).strip()
        sha = await self.commit_tree(tree, [], "Initial commit\n", name, email)
        await self.update_ref(f"refs/heads/{branch}", sha, ZERO_SHA, "initial commit")
        return sha

    async def changed_files(self, base: str, head: str) -> list[tuple[str, str]]:
        """(status, path) of every path ``head`` changes since its merge base with ``base``: ``A``dded,
        ``M``odified (a type change counts as one) or ``D``eleted; renames are split into D + A, so
        a renamed kernel is a new file that needs its own verification."""
        out = await self.git("diff", "--name-status", "-z", "--no-renames", "--no-color", f"{base}...{head}")
        parts = out.split("\0")
        changes = []
        for status, path in zip(parts[0::2], parts[1::2], strict=False):
            if status and path:
                changes.append(("M" if status[0] == "T" else status[0], path))
        return changes

    async def diff(self, base: str, head: str, max_bytes: int = 2_000_000) -> str:
        text = await self.git("diff", "--no-color", "--no-ext-diff", f"{base}...{head}")
        return text[:max_bytes]

    async def read_tree(
        self, sha: str, suffixes: tuple[str, ...] = (".md",), max_files: int = 2000
    ) -> list[RepoFile]:
        """Text files of commit ``sha`` whose names end in one of ``suffixes`` (each up to 512 KiB)."""
        listing = await self.git("ls-tree", "-r", "-z", "--long", sha)
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
        batch = await run_git_bytes(
            "cat-file", "--batch", git_dir=self.path, stdin="".join(f"{b}\n" for b, _ in wanted).encode()
        )
        return [RepoFile(path, text) for (_, path), text in zip(wanted, _split_batch(batch), strict=True)]

    async def read_file(self, sha: str, path: str) -> str | None:
        try:
            return await self.git("show", f"{sha}:{path}")
        except GitError:
            return None

    async def seed_branch(
        self,
        branch: str,
        files: Mapping[str, bytes],
        message: str,
        name: str,
        email: str,
    ) -> str | None:
        """Commit ``files`` on top of ``branch`` when it holds only its initial commit; else do nothing.

        Returns the new commit, or None when the branch already has history (seeded or changed by PRs).
        The ref moves by compare-and-swap, so a concurrent seeder or merge makes this a no-op too."""
        head = await self.branch_sha(branch)
        if head is None:
            raise GitError(f"branch {branch} does not exist")
        if int((await self.git("rev-list", "--count", head)).strip()) != 1:
            return None
        index_lines = []
        for path, content in sorted(files.items()):
            if path.startswith("/") or ".." in path.split("/"):
                raise ValueError(f"bad path in seed tree: {path!r}")
            blob = (await self.git("hash-object", "-w", "--stdin", stdin=content)).strip()
            index_lines.append(f"100644 {blob}\t{path}\n")
        index = self.path / f"kswarm-seed-{head[:12]}.index"
        env = {"GIT_INDEX_FILE": str(index)}
        try:
            await self.git("read-tree", head, env=env)
            await self.git("update-index", "--index-info", env=env, stdin="".join(index_lines).encode())
            tree = (await self.git("write-tree", env=env)).strip()
        finally:
            index.unlink(missing_ok=True)
        commit = await self.commit_tree(tree, [head], message, name, email)
        if not await self.update_ref(f"refs/heads/{branch}", commit, head, "kswarm seed"):
            return None
        return commit


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
