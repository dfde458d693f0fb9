"""The asyncio side of the git layer: git as asyncio subprocesses, for the gateway, which must not
block its event loop (the embedded forge's bare repositories and smart HTTP).

``BareRepo`` reads and writes a bare repository with plumbing, never through the receive check; only
the embedded forge uses it (``gateway/forge/embedded*.py``), which applies the push rules to its
server-side writes itself. Every other component reaches repositories through the Forge protocol.
"""

from __future__ import annotations

import asyncio
import secrets
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gateway.git.core import GitError, git_env
from gateway.git.diffcut import CutDiff, DiffCutter, stream_git

ZERO_SHA = "0" * 40
RECEIVE_SCRIPT = Path(__file__).resolve().parents[1] / "forge" / "embedded" / "receive.py"


@dataclass(frozen=True)
class TreeEntry:
    """A blob in a commit's tree."""

    path: str
    mode: str  # 100644, 100755 or 120000 (a symlink)
    sha: str
    size: int


@dataclass(frozen=True)
class CommitMeta:
    sha: str
    parents: list[str]
    tree: str
    author_name: str
    author_email: str
    authored: float
    committer_name: str
    committer_email: str
    committed: float
    message: str


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

    # git checks every object a push brings (fsck: malformed commits, trees, tags) before any hook runs
    RECEIVE_CONFIG = (("receive.fsckObjects", "true"),)

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
            *self.RECEIVE_CONFIG,
        ):
            await self.git("config", key, value)
        self.install_hooks()

    async def configure_receive(self) -> None:
        """(Re)write the receive settings every repo has (repos made before they existed get them at
        start-up); the push limits' sizes come per push from the gateway (``ForgeSettings.push_env``)."""
        for key, value in self.RECEIVE_CONFIG:
            await self.git("config", key, value)

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
        if not ref or "\0" in ref or ref.startswith("-"):  # no argv holds a NUL; '-' is an option
            return None
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

    async def diff(
        self, base: str, head: str, max_bytes: int, max_file_bytes: int, hint: str = ""
    ) -> CutDiff:
        """What ``head`` changed since its merge base with ``base``, cut while git writes it
        (``gateway/git/diffcut.py``): git is killed once ``max_bytes`` are kept, never read whole.
        Files over ``max_file_bytes`` are never diffed (``core.bigFileThreshold`` makes git show
        them as binary, which costs nothing) and are shown as too large with their blobs' size."""
        hint = hint or f"see the rest with: git diff {base[:12]}...{head[:12]}"
        argv = ["diff", "--no-color", "--no-ext-diff", "--full-index", f"{base}...{head}"]
        return await self._cut(argv, max_bytes, max_file_bytes, hint)

    async def patch(self, base: str, head: str, max_bytes: int, max_file_bytes: int, hint: str) -> CutDiff:
        """``git format-patch --stdout`` of the commits ``head`` has since its merge base with ``base``
        (Gitea's ``.patch``), cut as ``diff`` is (binary contents are never inlined)."""
        fork = await self.merge_base(base, head)
        if fork is None:
            return CutDiff()
        argv = ["format-patch", "--stdout", "--no-color", "--no-binary", "--full-index", f"{fork}..{head}"]
        return await self._cut(argv, max_bytes, max_file_bytes, hint)

    async def _cut(self, argv: list[str], max_bytes: int, max_file_bytes: int, hint: str) -> CutDiff:
        cutter = DiffCutter(max_bytes, max_file_bytes, hint)
        big = f"core.bigFileThreshold={max(max_file_bytes, 1)}"
        await stream_git(["-c", big, *argv], self.path, cutter.feed)
        binary = cutter.binary_blobs()
        if binary:
            wanted = sorted({b for _, _, *blobs in binary for b in blobs if b != ZERO_SHA})
            sizes = await self.blob_sizes(wanted)
            for index, path, old, new in binary:
                size = sizes.get(old, 0) + sizes.get(new, 0)
                if max(sizes.get(old, 0), sizes.get(new, 0)) > max_file_bytes:
                    cutter.replace(index, path, size)
        return cutter.finish()

    async def blob_sizes(self, shas: list[str]) -> dict[str, int]:
        """The size of each blob in ``shas`` that exists (one ``git cat-file --batch-check``)."""
        if not shas:
            return {}
        listing = await self.git("cat-file", "--batch-check", stdin="".join(f"{s}\n" for s in shas).encode())
        sizes = {}
        for line in listing.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] == "blob":
                sizes[parts[0]] = int(parts[2])
        return sizes

    async def resolve(self, ref: str) -> str | None:
        """The commit ``ref`` names, a branch first (``refs/heads/<ref>``), then a tag or a sha, as a
        forge resolves it; None when it names no commit. One git process."""
        if not ref or "\n" in ref or "\0" in ref or ref.startswith("-"):
            return None
        names = [f"refs/heads/{ref}^{{commit}}", f"{ref}^{{commit}}"]
        result = await run_git(
            "cat-file", "--batch-check", git_dir=self.path, stdin="".join(f"{n}\n" for n in names).encode()
        )
        for line in result.out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] == "commit":
                return parts[0]
        return None

    async def reachable(self, sha: str) -> bool:
        """Whether commit ``sha`` exists and some ref (a branch, a tag, a PR's ref) contains it: what a
        clone can fetch. False for a commit a force-push left dangling, or one never pushed here."""
        if await self.resolve(sha) != sha:
            return False
        result = await run_git(
            "for-each-ref", "--contains", sha, "--count=1", "--format=%(refname)", git_dir=self.path
        )
        return result.rc == 0 and bool(result.out.strip())

    async def commit_info(self, sha: str) -> CommitMeta | None:
        """Parents, tree, author, committer and message of commit ``sha``; None when it is none."""
        if await self.rev_parse(sha) != sha:
            return None
        fmt = "%H%x00%P%x00%T%x00%an%x00%ae%x00%at%x00%cn%x00%ce%x00%ct%x00%B"
        out = await self.git("show", "-s", f"--format={fmt}", sha)
        fields = out.split("\0", 9)
        return CommitMeta(
            sha=fields[0],
            parents=fields[1].split(),
            tree=fields[2],
            author_name=fields[3],
            author_email=fields[4],
            authored=float(fields[5] or 0),
            committer_name=fields[6],
            committer_email=fields[7],
            committed=float(fields[8] or 0),
            message=fields[9].rstrip("\n") + "\n" if fields[9].strip() else "",
        )

    async def tree_entries(self, sha: str, prefix: str = "") -> list[TreeEntry]:
        """Every blob of commit ``sha`` (recursively, under ``prefix`` when given), with its blob sha
        and size; submodules and trees are left out, symlinks kept with their mode."""
        args = ["ls-tree", "-r", "-z", "--long", sha]
        if prefix:
            args += ["--", prefix.rstrip("/") + "/"]
        listing = await self.git(*args)
        entries: list[TreeEntry] = []
        for entry in listing.split("\0"):
            if not entry:
                continue
            meta, _, path = entry.partition("\t")
            parts = meta.split()
            if len(parts) != 4 or parts[1] != "blob":
                continue
            size = int(parts[3]) if parts[3] != "-" else 0
            entries.append(TreeEntry(path=path, mode=parts[0], sha=parts[2], size=size))
        return entries

    async def tree_listing(
        self, sha: str, recursive: bool, directory: str = ""
    ) -> list[tuple[str, str, str, int, str]]:
        """(mode, type, sha, size, path) of the tree of ``sha`` (a commit or a tree): its top level (or
        ``directory``'s), or every blob and subtree when ``recursive`` (Gitea's git trees API)."""
        args = ["ls-tree", "-z", "--long", *(["-r", "-t"] if recursive else []), sha]
        if directory:
            args += ["--", directory.strip("/") + "/"]
        out: list[tuple[str, str, str, int, str]] = []
        for item in (await self.git(*args)).split("\0"):
            meta, _, path = item.partition("\t")
            parts = meta.split()
            if len(parts) == 4:
                out.append((parts[0], parts[1], parts[2], int(parts[3]) if parts[3] != "-" else 0, path))
        return out

    async def object_type(self, sha: str) -> str | None:
        result = await run_git("cat-file", "-t", sha, git_dir=self.path)
        return result.out.strip() if result.rc == 0 else None

    async def entry(self, sha: str, path: str) -> TreeEntry | None:
        """The blob at ``path`` in commit ``sha`` (None: no such path, or a tree or submodule)."""
        if not path or "\n" in path or "\0" in path:
            return None
        found = await run_git("ls-tree", "-z", "--long", sha, "--", path, git_dir=self.path)
        if found.rc != 0:
            return None
        for item in found.out.split("\0"):
            meta, _, name = item.partition("\t")
            parts = meta.split()
            if name == path and len(parts) == 4 and parts[1] == "blob":
                return TreeEntry(path=name, mode=parts[0], sha=parts[2], size=int(parts[3]))
        return None

    async def read_blobs(self, shas: list[str]) -> list[bytes]:
        """The contents of blobs ``shas``, in order (one ``git cat-file --batch``)."""
        if not shas:
            return []
        batch = await run_git_bytes(
            "cat-file", "--batch", git_dir=self.path, stdin="".join(f"{b}\n" for b in shas).encode()
        )
        return _split_batch(batch)

    async def write_commit(
        self, parent: str, files: Mapping[str, bytes | None], message: str, name: str, email: str
    ) -> str:
        """A new commit on top of ``parent`` with ``files`` written (None: deleted), through a private
        index: nothing else of the tree changes and no ref moves (the caller compares and swaps)."""
        index_lines = []
        for path, content in sorted(files.items()):
            check_tree_path(path)
            if content is None:
                index_lines.append(f"0 {ZERO_SHA}\t{path}\n")
                continue
            blob = (await self.git("hash-object", "-w", "--stdin", stdin=content)).strip()
            index_lines.append(f"100644 {blob}\t{path}\n")
        index = self.path / f"kswarm-commit-{secrets.token_hex(8)}.index"
        env = {"GIT_INDEX_FILE": str(index)}
        try:
            await self.git("read-tree", parent, env=env)
            await self.git("update-index", "--index-info", env=env, stdin="".join(index_lines).encode())
            tree = (await self.git("write-tree", env=env)).strip()
        finally:
            index.unlink(missing_ok=True)
        return await self.commit_tree(tree, [parent], message, name, email)


def check_tree_path(path: str) -> None:
    """A path a commit may write: relative, normalised, never into ``.git``."""
    parts = path.split("/")
    if (
        not path
        or path.startswith("/")
        or any(p in ("", ".", "..") for p in parts)
        or any(p.lower() == ".git" for p in parts)
        or any(c in path for c in "\0\n\r\\")
    ):
        raise ValueError(f"bad path {path!r}: a relative path inside the repository")


def _split_batch(data: bytes) -> list[bytes]:
    """The contents from ``git cat-file --batch`` output: per object a header line ``sha type size``,
    ``size`` bytes of content and a newline."""
    texts: list[bytes] = []
    pos = 0
    while pos < len(data):
        end = data.index(b"\n", pos)
        header = data[pos:end].split()
        start = end + 1
        if len(header) != 3:  # "<sha> missing": no content follows
            texts.append(b"")
            pos = start
            continue
        size = int(header[2])
        texts.append(data[start : start + size])
        pos = start + size + 1
    return texts
