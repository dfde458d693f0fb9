"""A fresh checkout of exactly one commit, for one job attempt.

The worker clones over HTTP from the forge with its own token (passed to git through
``GIT_CONFIG_*`` variables, never on a command line or in a config file the job could read), checks
out the sha detached, verifies HEAD is that sha, and deletes ``.git``: the job gets a plain tree.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
from pathlib import Path


class CheckoutError(RuntimeError):
    pass


def git_env(token: str | None, home: Path) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "LANG": "C.UTF-8",
    }
    if token:
        env.update(
            GIT_CONFIG_COUNT="1",
            GIT_CONFIG_KEY_0="http.extraHeader",
            GIT_CONFIG_VALUE_0=f"Authorization: Bearer {token}",
        )
    return env


async def _git(*args: str, env: dict[str, str], cwd: Path | None = None, limit_s: float = 120) -> str:
    proc = await asyncio.create_subprocess_exec(
        "git",
        *args,
        cwd=str(cwd) if cwd else None,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), limit_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise CheckoutError(f"git {args[0]} timed out after {limit_s:.0f} s") from None
    if proc.returncode != 0:
        raise CheckoutError(f"git {args[0]} failed: {err.decode(errors='replace').strip()[-500:]}")
    return out.decode().strip()


async def checkout(
    clone_url: str, sha: str, dest: Path, token: str | None = None, limit_s: float = 120
) -> None:
    """Clone ``clone_url`` into ``dest`` (which must not exist) at exactly ``sha``, without ``.git``."""
    home = dest.parent / ".git-home"
    home.mkdir(parents=True, exist_ok=True)
    env = git_env(token, home)
    try:
        await _git("clone", "--quiet", "--no-checkout", "--", clone_url, str(dest), env=env, limit_s=limit_s)
        await _git(
            "-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", sha, env=env, cwd=dest
        )
        head = await _git("rev-parse", "HEAD", env=env, cwd=dest)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    if head != sha:
        raise CheckoutError(f"checked out {head}, expected {sha}")
    shutil.rmtree(dest / ".git")


def inside(root: Path, relative: str) -> Path:
    """``root/relative``, refusing anything that leaves ``root`` and any symlink on the way: a
    candidate linked to another file (another agent's kernel, a task file) would be verified as that
    file while the PR claims the link."""
    path = (root / relative).resolve()
    if not path.is_relative_to(root.resolve()):
        raise CheckoutError(f"{relative} leaves the checkout")
    if path != root.resolve() / relative:
        raise CheckoutError(f"{relative} is a symlink (or passes through one): a kernel is a plain file")
    if not path.is_file():
        raise CheckoutError(f"no file {relative} in the checkout")
    return path


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
