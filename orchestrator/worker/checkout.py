"""A fresh checkout of exactly one commit, for one job attempt.

The worker clones over HTTP from the forge with its own token (passed to git through
``GIT_CONFIG_*`` variables, never on a command line or in a config file the job could read), checks
out the sha detached, verifies HEAD is that sha, and deletes ``.git``: the job gets a plain tree
(``gateway/git/sync.py: checkout_at``).
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

from gateway.git.core import GitError
from gateway.git.sync import checkout_at


class CheckoutError(RuntimeError):
    pass


async def checkout(
    clone_url: str, sha: str, dest: Path, token: str | None = None, limit_s: float = 120
) -> None:
    """Clone ``clone_url`` into ``dest`` (which must not exist) at exactly ``sha``, without ``.git``
    (the git layer's ``checkout_at``, in a thread: the worker's event loop keeps heartbeating)."""
    try:
        await asyncio.to_thread(checkout_at, clone_url, sha, dest, token, limit_s)
    except GitError as exc:
        raise CheckoutError(str(exc)) from None


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
