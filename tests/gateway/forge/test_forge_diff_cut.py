"""The diff cutter (``gateway/git/diffcut.py``) and ``BareRepo.diff``: git's output is read in chunks,
cut per file and in total, and git is killed once the cap is reached (never read whole)."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gateway.git import diffcut
from gateway.git.aio import BareRepo
from gateway.git.diffcut import CHUNK, DiffCutter


def make_repo(root: Path, files: dict[str, str]) -> tuple[BareRepo, str, str]:
    """A bare repo whose branch ``f`` adds ``files`` on top of ``main``; (repo, main sha, f sha)."""
    work = root / "work"
    work.mkdir()

    def git(*args: str) -> str:
        argv = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
        return subprocess.run(argv, cwd=work, check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q", "-b", "main")
    (work / "README").write_text("r\n")
    git("add", ".")
    git("commit", "-qm", "init")
    git("checkout", "-qb", "f")
    for path, text in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text)
    git("add", ".")
    git("commit", "-qm", "files")
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(root / "r.git")], check=True)
    return BareRepo(root / "r.git"), git("rev-parse", "main"), git("rev-parse", "f")


def test_the_cut_does_not_depend_on_how_the_diff_is_chunked(tmp_path: Path) -> None:
    files = {f"k/{i:02}.py": f"x = {i}\n" * (40 + 30 * i) for i in range(30)}
    files["k/0blank.py"] = "\n" * 3000  # a 3 KB blob whose diff is 6 KB
    repo, base, head = make_repo(tmp_path, files)
    whole = subprocess.run(
        ["git", f"--git-dir={repo.path}", "diff", f"{base}...{head}"], check=True, capture_output=True
    ).stdout
    texts = set()
    for size in (1, 13, 4096, len(whole)):
        cutter = DiffCutter(max_bytes=20_000, max_file_bytes=5_000, hint="see git")
        for i in range(0, len(whole), size):
            if not cutter.feed(whole[i : i + size]):
                break
        cut = cutter.finish()
        texts.add(cut.text)
        assert cut.truncated and "k/0blank.py" in cut.too_large
    (text,) = texts
    assert len(text.encode()) <= 20_000 + 100
    assert text.endswith("... diff cut at 20000 bytes; see git\n")
    assert "diff --git a/k/0blank.py b/k/0blank.py\n... file diff too large, 6" in text
    assert "+x = 3\n" in text


async def test_bare_repo_diff_stops_reading_and_kills_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 4 MB diff of 200 files under the per-file cap, read with a 100 KB cap: the cutter is fed
    about the cap (not the 4 MB) and the git process is killed, not left to finish."""
    repo, base, head = make_repo(tmp_path, {f"k/{i:03}.py": f"y = {i}\n" * 2500 for i in range(200)})
    procs: list[asyncio.subprocess.Process] = []
    spawn = asyncio.create_subprocess_exec

    async def spy(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        proc = await spawn(*args, **kwargs)
        procs.append(proc)
        return proc

    fed = [0]
    feed = DiffCutter.feed

    def counting(self: DiffCutter, chunk: bytes) -> bool:
        fed[0] += len(chunk)
        return feed(self, chunk)

    monkeypatch.setattr(diffcut.asyncio, "create_subprocess_exec", spy)
    monkeypatch.setattr(DiffCutter, "feed", counting)
    cut = await repo.diff(base, head, max_bytes=100_000, max_file_bytes=64 * 1024)
    assert cut.truncated and not cut.too_large
    assert 100_000 - 25_000 < len(cut.text.encode()) <= 100_000 + 200
    assert fed[0] <= 100_000 + 64 * 1024 + 2 * CHUNK  # what it kept, one file, the chunks in flight
    (git,) = procs
    assert git.returncode is not None and git.returncode < 0  # killed (by its signal), and reaped


async def test_files_over_the_per_file_cap_are_never_diffed(tmp_path: Path) -> None:
    """git treats them as binary (core.bigFileThreshold); the cut names them with their size."""
    repo, base, head = make_repo(tmp_path, {"big.txt": "z\n" * 100_000, "small.py": "a = 1\n"})
    cut = await repo.diff(base, head, max_bytes=100_000, max_file_bytes=50_000)
    assert cut.too_large == ["big.txt"] and cut.truncated
    assert "diff --git a/big.txt b/big.txt\n... file diff too large, 200000 bytes, not shown" in cut.text
    assert "+a = 1\n" in cut.text and not cut.text.rstrip().endswith("bytes; see")
